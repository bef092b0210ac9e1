import DuplexSchema

/// The lifecycle of a ``WebSocket``: connecting, reconnecting, disconnecting and terminating,
/// and the queue of sends made while reconnecting.
///
/// A pure value: every input returns the actions for its owner to perform. Each connection
/// attempt has a generation number, so a late report from an abandoned connection is ignored.
struct WebSocketLifecycle {
    enum Phase: Equatable {
        case idle
        case connecting(generation: UInt64, attempt: Int, isReconnect: Bool)
        case connected(generation: UInt64)
        case disconnecting(generation: UInt64)
        case waitingToReconnect(attempt: Int)
        case disconnected(WebSocketDisconnectReason)
        case terminated
    }

    enum Action: Equatable {
        /// Open a connection for this generation.
        case startConnecting(generation: UInt64)
        /// Close the current connection with a close frame.
        case closeConnection(code: WebSocketCloseCode, reason: String)
        /// Drop the current connection with no close frame.
        case abortConnection
        /// Close a connection that opened after it was no longer wanted.
        case discardConnection(generation: UInt64)
        /// Wait, then call `reconnectTimerFired(attempt:)`.
        case scheduleReconnect(attempt: Int, delay: Duration)
        case cancelReconnectTimer
        /// Write these queued messages, in order, before anything else.
        case flush([WebSocketMessage])
        case startPinging
        case stopPinging
        case publishState(WebSocketState)
        case emit(WebSocketEvent)
        /// Resume everyone waiting in `connect()`: with success when nil, else this error.
        case resumeConnectWaiters(WebSocketError?)
        case resumeDisconnectWaiters
        case pingFailed(missed: Int)
        /// Finish every stream: the socket is terminated.
        case finishStreams
    }

    private(set) var phase: Phase = .idle
    private var generation: UInt64 = 0
    private var queue: [WebSocketMessage] = []
    /// The retry core shared with the SSE client: attempts in a row, and the strategy's waits.
    private var schedule: ReconnectionSchedule
    let maxQueuedSends: Int

    init(strategy: ReconnectionStrategy, maxQueuedSends: Int) {
        self.schedule = ReconnectionSchedule(strategy: strategy)
        self.maxQueuedSends = maxQueuedSends
    }

    var strategy: ReconnectionStrategy { schedule.strategy }

    /// The public state for the current phase.
    var state: WebSocketState {
        switch phase {
        case .idle: .notConnected
        case .connecting, .waitingToReconnect: .connecting
        // No state of its own for the close handshake (seed 004's switches are exhaustive over
        // four states): still connected until the handshake is done.
        case .connected, .disconnecting: .connected(protocol: negotiatedProtocol)
        case .disconnected(let reason): .disconnected(reason)
        case .terminated: .disconnected(.terminated)
        }
    }

    private(set) var negotiatedProtocol: String?

    /// The generation of the open connection, if one is open or closing.
    var liveGeneration: UInt64? {
        switch phase {
        case .connected(let generation), .disconnecting(let generation): generation
        default: nil
        }
    }

    var queuedCount: Int { queue.count }

    // MARK: Requests

    enum ConnectDecision: Equatable {
        /// Already connected: return.
        case alreadyConnected
        /// Wait for the attempt under way (the actions start one if needed).
        case wait([Action])
        /// Refuse.
        case fail(WebSocketError)
    }

    mutating func connect() -> ConnectDecision {
        switch phase {
        case .connected:
            return .alreadyConnected
        case .connecting:
            return .wait([])
        case .idle, .disconnected:
            schedule.connectionProved()
            return .wait(beginAttempt(attempt: 0, isReconnect: false))
        case .waitingToReconnect(let attempt):
            return .wait([.cancelReconnectTimer] + beginAttempt(attempt: attempt, isReconnect: true))
        case .disconnecting:
            return .fail(WebSocketError(.notConnected, "a disconnect is under way; await it, then connect"))
        case .terminated:
            return .fail(WebSocketError(.terminated, "the socket was terminated and cannot connect again"))
        }
    }

    enum DisconnectDecision: Equatable {
        /// Nothing to do: not connected.
        case done
        /// Wait for the close handshake (the actions start it if needed).
        case wait([Action])
        /// Done at once, after these actions.
        case immediate([Action])
    }

    mutating func disconnect(code: WebSocketCloseCode, reason: String) -> DisconnectDecision {
        switch phase {
        case .idle, .disconnected, .terminated:
            return .done
        case .disconnecting:
            return .wait([])
        case .connected(let generation):
            phase = .disconnecting(generation: generation)
            return .wait([.stopPinging, .closeConnection(code: code, reason: reason)])
        case .connecting:
            phase = .disconnected(.manuallyDisconnected)
            var actions: [Action] = [.resumeConnectWaiters(WebSocketError(.notConnected, "disconnect() was called while connecting"))]
            actions += dropQueue(because: "disconnect() was called")
            return .immediate(actions + [.publishState(state)])
        case .waitingToReconnect:
            phase = .disconnected(.manuallyDisconnected)
            return .immediate([.cancelReconnectTimer] + dropQueue(because: "disconnect() was called") + [.publishState(state)])
        }
    }

    mutating func terminate() -> [Action] {
        let previous = phase
        guard previous != .terminated else { return [] }
        phase = .terminated
        var actions: [Action] = [.stopPinging, .cancelReconnectTimer]
        switch previous {
        case .connected, .disconnecting:
            actions.append(.closeConnection(code: .normalClosure, reason: "terminated"))
        default:
            break
        }
        actions.append(.resumeConnectWaiters(WebSocketError(.terminated, "terminate() was called")))
        actions.append(.resumeDisconnectWaiters)
        actions += dropQueue(because: "terminate() was called")
        actions += [.publishState(.disconnected(.terminated)), .finishStreams]
        return actions
    }

    enum SendDecision: Equatable {
        /// Write it now on the open connection.
        case write
        /// Queued, to be flushed once connected.
        case queued
        case fail(WebSocketError)
    }

    mutating func send(_ message: WebSocketMessage) -> SendDecision {
        switch phase {
        case .connected:
            return .write
        case .connecting, .waitingToReconnect:
            guard queue.count < maxQueuedSends else {
                return .fail(WebSocketError(.sendQueueFull, "\(maxQueuedSends) sends already wait for the connection"))
            }
            queue.append(message)
            return .queued
        case .idle, .disconnected, .disconnecting:
            return .fail(WebSocketError(.notConnected, "the socket is not connected; call connect() first"))
        case .terminated:
            return .fail(WebSocketError(.terminated, "the socket was terminated"))
        }
    }

    // MARK: Reports

    mutating func connectSucceeded(generation: UInt64, protocol chosen: String?) -> [Action] {
        guard case .connecting(let current, _, _) = phase, current == generation else {
            return [.discardConnection(generation: generation)]
        }
        phase = .connected(generation: generation)
        schedule.connectionProved()
        negotiatedProtocol = chosen
        let queued = queue
        queue = []
        var actions: [Action] = [.publishState(state), .emit(.connected(protocol: chosen))]
        if !queued.isEmpty { actions.append(.flush(queued)) }
        actions += [.startPinging, .resumeConnectWaiters(nil)]
        return actions
    }

    mutating func connectFailed(generation: UInt64, error: WebSocketError) -> [Action] {
        guard case .connecting(let current, _, let isReconnect) = phase, current == generation else { return [] }
        var actions: [Action] = [.emit(.error(error))]
        if isReconnect {
            actions += afterLoss(reason: .error(error))
        } else {
            phase = .disconnected(.error(error))
            actions += dropQueue(because: "the connection could not be opened")
            actions.append(.publishState(state))
        }
        actions.append(.resumeConnectWaiters(error))
        return actions
    }

    /// The connection of `generation` ended; `code` is the peer's close code (nil: none came).
    mutating func connectionClosed(generation: UInt64, code: WebSocketCloseCode?, reason: String, error: WebSocketError?) -> [Action] {
        let closeEvent = WebSocketEvent.disconnected(code: code, reason: code == nil ? nil : reason)
        switch phase {
        case .disconnecting(let current) where current == generation:
            phase = .disconnected(.manuallyDisconnected)
            return [.emit(closeEvent), .publishState(state), .resumeDisconnectWaiters]
        case .connected(let current) where current == generation:
            var actions: [Action] = [.stopPinging]
            if let error { actions.append(.emit(.error(error))) }
            actions.append(.emit(closeEvent))
            let reason: WebSocketDisconnectReason = error.map { .error($0) } ?? .closed(code: code ?? .abnormalClosure, reason: reason)
            if code == .normalClosure, error == nil {
                phase = .disconnected(reason)
                return actions + [.publishState(state)]
            }
            return actions + afterLoss(reason: reason)
        default:
            return []
        }
    }

    /// `maxPingFailures` pings in a row went unanswered on `generation`.
    mutating func pingFailed(generation: UInt64, missed: Int) -> [Action] {
        guard case .connected(let current) = phase, current == generation else { return [] }
        let error = WebSocketError(.pingFailed, "\(missed) pings in a row went unanswered")
        var actions: [Action] = [.stopPinging, .abortConnection, .pingFailed(missed: missed), .emit(.error(error))]
        actions.append(.emit(.disconnected(code: nil, reason: nil)))
        return actions + afterLoss(reason: .pingFailed(missedPings: missed))
    }

    mutating func reconnectTimerFired(attempt: Int) -> [Action] {
        guard case .waitingToReconnect(let waiting) = phase, waiting == attempt else { return [] }
        return beginAttempt(attempt: attempt, isReconnect: true)
    }

    // MARK: Helpers

    private mutating func beginAttempt(attempt: Int, isReconnect: Bool) -> [Action] {
        generation += 1
        phase = .connecting(generation: generation, attempt: attempt, isReconnect: isReconnect)
        return [.publishState(.connecting), .startConnecting(generation: generation)]
    }

    /// After a lost connection or a failed reconnection: wait and retry, or give up.
    private mutating func afterLoss(reason: WebSocketDisconnectReason) -> [Action] {
        if let next = schedule.nextAttempt() {
            phase = .waitingToReconnect(attempt: next.attempt)
            return [.publishState(.disconnected(reason)), .scheduleReconnect(attempt: next.attempt, delay: next.delay)]
        }
        let made = schedule.attempts
        let finalReason: WebSocketDisconnectReason = made > 0 ? .reconnectionGaveUp(attempts: made) : reason
        phase = .disconnected(finalReason)
        return dropQueue(because: made > 0 ? "reconnection gave up" : "the connection was lost") + [.publishState(state)]
    }

    /// Empties the queue, reporting what was not sent: a queued send is never dropped silently.
    private mutating func dropQueue(because why: String) -> [Action] {
        guard !queue.isEmpty else { return [] }
        let count = queue.count
        queue = []
        return [.emit(.error(WebSocketError(.notConnected, "\(count) queued message\(count == 1 ? " was" : "s were") not sent: \(why)")))]
    }
}
