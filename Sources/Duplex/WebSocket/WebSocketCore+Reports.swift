import DuplexSchema
import DuplexWire
import Logging
import NIOConcurrencyHelpers

/// What the connection reports to the core: its opening, what it received, pongs, drains and its close.
extension WebSocketCore {
    func connectionOpened(generation: UInt64, connection: any WebSocketTransportConnection) {
        state.locked { state in
            let actions = state.lifecycle.connectSucceeded(generation: generation)
            if case .discardConnection = actions.first {
                connection.close(code: .normalClosure, reason: "no longer wanted")
                return
            }
            state.connection = (generation, connection)
            state.negotiatedProtocol = connection.negotiatedProtocol
            perform(actions, in: &state)
        }
    }

    func connectionFailed(generation: UInt64, error: WebSocketError) {
        state.locked { state in
            perform(state.lifecycle.connectFailed(generation: generation, loss: .failed(error)), in: &state)
        }
    }

    func received(_ message: WebSocketMessage, generation: UInt64) {
        // Counted as it arrives, before the lock: the metrics backend is not our code.
        metrics.received(bytes: message.byteCount)
        state.locked { state in
            switch state.lifecycle.received(generation: generation) {
            case .deliver:
                deliver(message, generation: generation, in: &state)
            case .holdBack:
                if let waiter = state.preambleWaiter, waiter.generation == generation {
                    // The preamble takes it: the streams never see it.
                    state.preambleWaiter = nil
                    state.afterUnlock.append { waiter.continuation.resume(returning: message) }
                    return
                }
                if state.early.generation != generation { state.early = (generation, []) }
                state.early.messages.append(message)
            case .drop:
                break
            }
        }
    }

    func deliver(_ message: WebSocketMessage, generation: UInt64, in state: inout State) {
        state.receivedCount &+= 1
        messages.yield(message)
        reports.yield(.message(message, connection: generation))
        events.yield(.message(message))
    }

    /// How long a protocol error waits for a stream that was asked for but never read to start
    /// reading (its reader may be about to iterate it, right after `connect()` returned).
    static let unreadGrace = Duration.milliseconds(50)

    /// Calls `proceed` once every reader of ``events``, ``messages`` and ``reports`` has handled
    /// what the connection of `generation` gave it (each came back for more), or the stream
    /// finished: its messages held back until its opening is processed are delivered first. A
    /// stream never read is waited for only ``unreadGrace``: one the app asked for and does not
    /// read holds nothing back for longer.
    func whenDeliveredHandled(generation: UInt64, _ proceed: @escaping @Sendable () -> Void) {
        let now = state.locked { state -> Bool in
            guard state.lifecycle.received(generation: generation) == .holdBack else { return true }
            state.failureWaiting = (generation, proceed)
            return false
        }
        if now { whenReadersCameBack(proceed) }
    }

    /// Calls `proceed` once every reader came back for more (a stream never read: after
    /// ``unreadGrace``).
    func whenReadersCameBack(_ proceed: @escaping @Sendable () -> Void) {
        let remaining = NIOLockedValueBox(3)
        let one: @Sendable () -> Void = {
            if remaining.withLockedValue({ count in
                count -= 1
                return count == 0
            }) {
                proceed()
            }
        }
        events.whenIdle(one)
        messages.whenIdle(one)
        reports.whenIdle(one)
        // Real time, as the close timeout that bounds the whole wait is: a bound on the app.
        Task { [events, messages, reports] in
            try? await Task.sleep(for: Self.unreadGrace)
            events.stopWaitingForUnread()
            messages.stopWaitingForUnread()
            reports.stopWaitingForUnread()
        }
    }

    /// The connection of `generation` proved itself (for a client whose policy says when:
    /// ``ChatClient``, once welcomed).
    func proved(generation: UInt64) {
        state.locked { $0.lifecycle.proved(generation: generation) }
    }

    func receivedPong(_ payload: [UInt8], generation: UInt64) {
        let now = reading.now()
        state.locked { state in
            if let manual = state.manualPings.removeValue(forKey: payload) {
                let roundTrip = now - manual.sentAt
                let metrics = self.metrics
                state.afterUnlock.append {
                    metrics.pong(after: roundTrip)
                    manual.continuation.resume(returning: roundTrip)
                }
                return
            }
            guard state.lifecycle.liveGeneration == generation,
                let roundTrip = state.pingTracker?.pongReceived(payload, at: now)
            else { return }
            state.roundTripTime = roundTrip
            let metrics = self.metrics
            state.afterUnlock.append { metrics.pong(after: roundTrip) }
            roundTrips.yield(roundTrip)
        }
    }

    func drained(generation: UInt64) {
        state.locked { state in
            guard state.connection?.generation == generation else { return }
            releaseDrainWaiters(in: &state)
        }
    }

    func closed(generation: UInt64, code: WebSocketCloseCode?, reason: String, error: WebSocketError?, unwritten: Int) {
        state.locked { state in
            if unwritten > 0 {
                // Never silent: reported now, and thrown by the next send or flush.
                let failure = WebSocketError(
                    .connectionLost,
                    "\(unwritten) sent message\(unwritten == 1 ? " was" : "s were") not written before the connection ended"
                )
                state.sendFailure = failure
                events.yield(.error(failure))
            }
            let loss = WebSocketLoss.closed(code: code, reason: reason, error: error)
            if case .connecting(let pending, _) = state.lifecycle.phase, pending == generation {
                // Closed during its preamble: what the preamble waits for will not come.
                let failure = WebSocketError(.preambleFailed, "the connection closed during the preamble (\(loss.reason))")
                state.preambleClosed = (generation, failure)
                if let waiter = state.preambleWaiter, waiter.generation == generation {
                    state.preambleWaiter = nil
                    state.afterUnlock.append { waiter.continuation.resume(throwing: failure) }
                }
            }
            perform(state.lifecycle.connectionLost(generation: generation, loss: loss), in: &state)
        }
    }
}
