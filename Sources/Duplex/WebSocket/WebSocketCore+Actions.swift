import DuplexSchema
import DuplexWire
import Logging
import NIOConcurrencyHelpers

/// What ``WebSocketCore`` does for the lifecycle's actions that are its own: connecting, the
/// ping timer, the connection, and the streams.
extension WebSocketCore {
    /// Carries out the lifecycle's actions that are the socket's own, under the lock.
    func performOwn(_ action: Lifecycle.Action, in state: inout State) {
        switch action {
        case .startConnecting(let generation):
            state.early = (generation, [])
            state.attemptTask = startConnecting(generation: generation, prepare: state.prepareRequest)
        case .cancelAttempt:
            // A connection that opens all the same is discarded (connectionOpened).
            state.attemptTask?.cancel()
            state.attemptTask = nil
        case .discardConnection:
            break
        case .closeConnection(let code, let reason):
            state.connection?.connection.close(code: code, reason: reason)
        case .abortConnection:
            state.connection?.connection.abort()
            state.connection = nil
            releaseDrainWaiters(in: &state)
        case .flush(let queued):
            let bytes = queued.map(\.byteCount)
            let metrics = self.metrics
            state.afterUnlock.append { for count in bytes { metrics.sent(bytes: count) } }
            for message in queued where state.connection?.connection.write(message) == true {
                state.aboveHighWatermark = true
            }
        case .deliverHeld(let generation):
            if state.early.generation == generation {
                let held = state.early.messages
                state.early = (0, [])
                for message in held { deliver(message, generation: generation, in: &state) }
            }
            // A protocol error that came before the opening was processed waits for the readers
            // of what was just delivered.
            if let waiting = state.failureWaiting, waiting.generation == generation {
                state.failureWaiting = nil
                state.afterUnlock.append { [self] in whenReadersCameBack(waiting.proceed) }
            }
        case .startPinging:
            startPinging(in: &state)
        case .stopPinging:
            state.pingTask?.cancel()
            state.pingTask = nil
            state.pingTracker = nil
        case .opened(let generation):
            events.yield(.connected(protocol: state.negotiatedProtocol))
            reports.yield(.opened(connection: generation))
        case .attemptFailed(let loss, _):
            if let error = loss.error { events.yield(.error(error)) }
        case .lost(let loss, _):
            connectionEnded(in: &state)
            if case .pingFailed(let missed) = loss {
                let logger = configuration.logger
                state.afterUnlock.append { logger.warning("ping failed: closing the connection", metadata: ["missed": "\(missed)"]) }
                if let hook = state.onPingFailed, let error = loss.error {
                    state.afterUnlock.append { hook(error) }
                }
            }
            if let error = loss.error { events.yield(.error(error)) }
            events.yield(Self.closeEvent(loss))
        case .closedAsAsked(let loss):
            connectionEnded(in: &state)
            events.yield(Self.closeEvent(loss))
        case .publish(let status):
            let published: WebSocketState
            switch status {
            case .reconnecting(let loss):
                published = .disconnected(loss.reason)
                reports.yield(.disconnected(loss.reason, reconnecting: true))
            case .ended(let end):
                published = .disconnected(end.reason)
                reports.yield(.disconnected(end.reason, reconnecting: false))
            case .terminated:
                published = .disconnected(.terminated)
                reports.yield(.disconnected(.terminated, reconnecting: false))
            case .notConnected, .connecting, .connected:
                published = state.publicState
            }
            states.yield(published)
        case .scheduleRetry, .cancelRetryTimer, .resumeConnectWaiters, .resumeDisconnectWaiters:
            break  // the runner's (LifecycleRunner.perform)
        case .dropQueued(let count, let why):
            events.yield(.error(WebSocketError(.notConnected, "\(count) queued message\(count == 1 ? " was" : "s were") not sent: \(why)")))
        case .finish:
            events.finish()
            messages.finish()
            reports.finish()
            states.finish()
            roundTrips.finish()
        }
    }

    /// The open connection is gone: forget it, and release the sends waiting for it to drain.
    private func connectionEnded(in state: inout State) {
        state.connection = nil
        releaseDrainWaiters(in: &state)
    }

    /// The ``WebSocketEvent/disconnected(code:reason:)`` event for `loss`: the peer's close code
    /// and reason, or neither when no close frame came.
    private static func closeEvent(_ loss: WebSocketLoss) -> WebSocketEvent {
        guard case .closed(let code, let reason, _) = loss, let code else { return .disconnected(code: nil, reason: nil) }
        return .disconnected(code: code, reason: reason)
    }

    /// Starts an attempt. Runs under the lock: `prepare` comes from the locked state. The task
    /// ends with the attempt (the transport's connect timeout bounds it), or when the lifecycle
    /// cancels it.
    private func startConnecting(
        generation: UInt64,
        prepare: (@Sendable (WebSocketRequest) async -> WebSocketRequest)?
    ) -> Task<Void, Never> {
        let delegate = ConnectionDelegate(core: self, generation: generation)
        let transport = self.transport
        let configuration = self.configuration
        let original = self.request
        return Task(on: clock) {
            do {
                let request = await prepare?(original) ?? original
                let connection = try await transport.connect(request: request, configuration: configuration, delegate: delegate)
                // The app's own handshake goes first on every connection, before anything queued.
                try await delegate.core?.runPreamble(generation: generation, connection: connection)
                delegate.core?.connectionOpened(generation: generation, connection: connection)
                    ?? connection.close(code: .goingAway, reason: "released")
            } catch {
                let described = error as? WebSocketError ?? WebSocketError(.connectionFailed, "\(error)")
                delegate.core?.connectionFailed(generation: generation, error: described)
            }
        }
    }

    private func startPinging(in state: inout State) {
        guard let ping = configuration.ping, let generation = state.connection?.generation else { return }
        state.pingTracker = PingTracker(maxFailures: ping.maxPingFailures)
        let clock = self.clock
        // The first ping's time is taken now, each next one's when the one before is done with.
        let firstPing = sleeper(on: clock, for: ping.pingInterval - ping.pongTimeout)
        // Cancelled by the lifecycle's stopPinging, and ends by itself once the connection is gone.
        state.pingTask = Task(on: clock) { [weak self] in
            var nextPing = firstPing
            while !Task.isCancelled {
                guard (try? await nextPing()) != nil else { return }
                let pongDue = sleeper(on: clock, for: ping.pongTimeout)
                guard self?.sendPing(generation: generation) == true else { return }
                guard (try? await pongDue()) != nil else { return }
                nextPing = sleeper(on: clock, for: ping.pingInterval - ping.pongTimeout)
                guard self?.pongTimeoutElapsed(generation: generation) == true else { return }
            }
        }
    }

    /// Sends the next ping; false when the connection is gone.
    private func sendPing(generation: UInt64) -> Bool {
        state.locked { state in
            guard state.lifecycle.liveGeneration == generation, let connection = state.connection?.connection,
                var tracker = state.pingTracker
            else { return false }
            connection.ping(tracker.nextPing(at: reading.now()))
            state.pingTracker = tracker
            state.receivedAtPing = state.receivedCount
            return true
        }
    }

    /// Counts a missed pong; false when the pinging should stop.
    private func pongTimeoutElapsed(generation: UInt64) -> Bool {
        state.locked { state in
            guard state.lifecycle.liveGeneration == generation, var tracker = state.pingTracker else { return false }
            // Messages arrived since the ping: the peer is alive, and its pong waits behind them.
            // Or reads are held back for slow readers: the pong may sit unread in the socket.
            guard gate.isOpen, state.receivedCount == state.receivedAtPing else {
                tracker.pongTimeoutExcused()
                state.pingTracker = tracker
                return true
            }
            let outcome = tracker.pongTimeoutElapsed()
            state.pingTracker = tracker
            switch outcome {
            case .failed(let failures):
                let metrics = self.metrics
                state.afterUnlock.append { metrics.missedPing() }
                perform(state.lifecycle.connectionLost(generation: generation, loss: .pingFailed(missed: failures), abort: true), in: &state)
                return false
            case .missed(let failures):
                let (metrics, logger) = (self.metrics, configuration.logger)
                state.afterUnlock.append {
                    metrics.missedPing()
                    logger.debug("ping unanswered", metadata: ["failures": "\(failures)"])
                }
                return true
            case .answered, nil:
                return true
            }
        }
    }
}
