import DuplexSchema
import DuplexWire
import Logging
import NIOConcurrencyHelpers

/// The engine behind a ``WebSocket`` (and ``ReconnectingWebSocket``, and ``ChatClient``'s
/// socket): runs ``ConnectionLifecycle`` with a ``WebSocketPolicy`` as a ``LifecycleRunner``,
/// owns the current transport connection, the ping timer, and the streams.
///
/// Actions are performed under the lock, so events and states reach every stream in one order;
/// nothing done under the lock calls back into it (transport calls return at once).
///
/// Sends are pipelined: ``send(_:)`` hands the message to the connection's outbound buffer and
/// returns, unless the buffer is above its high watermark; then it waits for the buffer to drain.
/// Receives are lossless: while a consumer of ``messages``, ``events`` or ``reports``
/// is behind, ``gate`` is closed and the transport stops reading.
final class WebSocketCore: LifecycleRunner {
    let request: WebSocketRequest
    let configuration: WebSocketConfiguration
    let transport: any WebSocketTransport
    let clock: any Clock<Duration>
    /// The time on `clock`, for round trips.
    let reading: ClockReading
    let metrics: ClientMetrics
    let events: Broadcaster<WebSocketEvent>
    let messages: Broadcaster<WebSocketMessage>
    /// Messages with their connection, and losses with whether a reconnection follows, for
    /// clients built on the socket (``ChatClient``).
    let reports: Broadcaster<ConnectionReport>
    let states: Broadcaster<WebSocketState>
    let roundTrips: Broadcaster<Duration>
    /// Closed while a lossless consumer is behind: the transport then holds back its reads.
    let gate = DemandGate()

    /// Everything that changes, under one lock (``state``).
    struct State: LifecycleState {
        var lifecycle: ConnectionLifecycle<WebSocketPolicy>
        var connection: (generation: UInt64, connection: any WebSocketTransportConnection)?
        /// The subprotocol the open connection negotiated.
        var negotiatedProtocol: String?
        /// Messages that arrived before their connection's opening was processed.
        var early: (generation: UInt64, messages: [WebSocketMessage]) = (0, [])
        /// A protocol error on a connection whose opening is not processed yet: its wait for the
        /// readers (``whenDeliveredHandled(generation:_:)``) starts once the held messages are
        /// delivered.
        var failureWaiting: (generation: UInt64, proceed: @Sendable () -> Void)?
        var connectWaiters = Waiters<Void>()
        var disconnectWaiters = Waiters<Void>()
        /// The attempt under way, the retry timer, and the keep-alive pings: each cancelled by the
        /// lifecycle's actions.
        var attemptTask: Task<Void, Never>?
        var retryTimer: Task<Void, Never>?
        var pingTask: Task<Void, Never>?
        var pingTracker: PingTracker?
        var roundTripTime: Duration?
        var onPingFailed: (@Sendable (WebSocketError) -> Void)?
        var prepareRequest: (@Sendable (WebSocketRequest) async -> WebSocketRequest)?
        var preamble: (@Sendable (WebSocketPreamble) async throws -> Void)?
        /// The preamble of a connection not yet reported open, waiting for its next message.
        var preambleWaiter: (generation: UInt64, continuation: CheckedContinuation<WebSocketMessage, any Error>)?
        /// A connection that closed during its preamble, and why.
        var preambleClosed: (generation: UInt64, error: WebSocketError)?
        /// Pings sent by ``WebSocket/ping(timeout:)``, by payload, waiting for their pong.
        var manualPings: [[UInt8]: (sentAt: Duration, continuation: CheckedContinuation<Duration, any Error>)] = [:]
        var manualPingCount: UInt64 = 0
        /// The connection's outbound buffer went above its high watermark and has not drained.
        var aboveHighWatermark = false
        /// Sends waiting for the outbound buffer to drain.
        var drainWaiters = Waiters<Void>()
        /// How many times a send waited for the buffer to drain, and who waits to hear of it.
        var sendSuspensions = 0
        var suspensionWatchers = Waiters<Void>()
        /// Messages of a lost connection that were not written: the next send or flush throws it.
        var sendFailure: WebSocketError?
        /// Messages received, and how many had been when the outstanding keep-alive ping went out.
        var receivedCount: UInt64 = 0
        var receivedAtPing: UInt64 = 0
        var afterUnlock: [@Sendable () -> Void] = []

        /// The public state for the lifecycle's phase.
        var publicState: WebSocketState {
            switch lifecycle.phase {
            case .idle: .notConnected
            case .connecting, .waiting: .connecting
            // No state of its own for the close handshake (seed 004's switches are exhaustive
            // over four states): still connected until the handshake is done.
            case .connected, .disconnecting: .connected(protocol: negotiatedProtocol)
            case .ended(let end): .disconnected(end.reason)
            case .terminated: .disconnected(.terminated)
            }
        }
    }

    let state: NIOLockedValueBox<State>

    /// - Parameter policy: which losses are retried; by default, what `configuration` says.
    init(request: WebSocketRequest, configuration: WebSocketConfiguration, clock: any Clock<Duration>, policy: WebSocketPolicy? = nil) {
        self.request = request
        self.configuration = configuration
        self.transport = configuration.transport.make()
        self.clock = clock
        self.reading = ClockReading(clock)
        self.metrics = ClientMetrics(kind: "websocket", factory: configuration.metrics)
        let logger = configuration.logger
        let limit = configuration.streamBufferLimit
        let bytes = configuration.streamBufferBytes
        let buffering = configuration.streamBuffering
        self.events = Broadcaster(
            limit: limit,
            byteLimit: bytes,
            cost: { event in if case .message(let message) = event { message.byteCount } else { 0 } },
            buffering: buffering,
            gate: gate,
            label: "events",
            logger: logger
        )
        self.messages = Broadcaster(
            limit: limit, byteLimit: bytes, cost: { $0.byteCount }, buffering: buffering, gate: gate, label: "messages", logger: logger)
        self.reports = Broadcaster(
            limit: limit,
            byteLimit: bytes,
            cost: { report in if case .message(let message, _) = report { message.byteCount } else { 0 } },
            buffering: .lossless,
            gate: gate,
            label: "reports",
            logger: logger
        )
        self.states = Broadcaster(limit: limit, buffering: .newest(limit), label: "stateEvents", logger: logger)
        self.roundTrips = Broadcaster(limit: limit, buffering: .newest(limit), label: "pingRoundTrips", logger: logger)
        self.state = NIOLockedValueBox(
            State(
                lifecycle: ConnectionLifecycle(
                    policy: policy ?? WebSocketPolicy(strategy: configuration.reconnection, maxQueued: configuration.maxQueuedSends)))
        )
        gate.onOpen { [weak self] in self?.resumeReading() }
    }

    /// The consumers caught up: the current connection reads again.
    private func resumeReading() {
        state.locked { $0.connection?.connection }?.resumeReading()
    }

    var currentState: WebSocketState { state.locked { $0.publicState } }
    var roundTripTime: Duration? { state.locked { $0.roundTripTime } }
    var queuedSendCount: Int { state.locked { $0.lifecycle.queuedCount } }
    var negotiatedExtensions: String? { state.locked { $0.connection?.connection.negotiatedExtensions } }

    var onPingFailed: (@Sendable (WebSocketError) -> Void)? {
        get { state.locked { $0.onPingFailed } }
        set { state.locked { $0.onPingFailed = newValue } }
    }

    var prepareRequest: (@Sendable (WebSocketRequest) async -> WebSocketRequest)? {
        get { state.locked { $0.prepareRequest } }
        set { state.locked { $0.prepareRequest = newValue } }
    }

    var preamble: (@Sendable (WebSocketPreamble) async throws -> Void)? {
        get { state.locked { $0.preamble } }
        set { state.locked { $0.preamble = newValue } }
    }

    /// Runs the preamble, if any, on the connection of `generation` before it is reported open.
    /// - Throws: ``WebSocketError/Code/preambleFailed`` when it throws; the connection is then
    ///   dropped.
    func runPreamble(generation: UInt64, connection: any WebSocketTransportConnection) async throws {
        guard let preamble = state.locked({ $0.preamble }) else { return }
        do {
            try await preamble(WebSocketPreamble(core: self, generation: generation, connection: connection))
        } catch {
            connection.abort()
            if let error = error as? WebSocketError, error.code == .preambleFailed { throw error }
            throw WebSocketError(.preambleFailed, "the preamble failed: \(error)")
        }
    }

    /// The next message of the connection of `generation`, for its preamble.
    func preambleReceive(generation: UInt64, timeout: Duration) async throws -> WebSocketMessage {
        try await withDeadline(
            timeout, clock: clock, orThrow: { WebSocketError(.preambleFailed, "no message within \(timeout) during the preamble") }
        ) {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<WebSocketMessage, any Error>) in
                    self.state.locked { state in
                        if state.early.generation == generation, !state.early.messages.isEmpty {
                            let message = state.early.messages.removeFirst()
                            state.afterUnlock.append { continuation.resume(returning: message) }
                        } else if let closed = state.preambleClosed, closed.generation == generation {
                            state.afterUnlock.append { continuation.resume(throwing: closed.error) }
                        } else {
                            state.preambleWaiter = (generation, continuation)
                        }
                    }
                }
            } onCancel: {
                self.state.locked { state -> CheckedContinuation<WebSocketMessage, any Error>? in
                    guard let waiter = state.preambleWaiter, waiter.generation == generation else { return nil }
                    state.preambleWaiter = nil
                    return waiter.continuation
                }?.resume(throwing: CancellationError())
            }
        }
    }

    /// A new events stream; it starts with `.connected` when a connection is open, so a loop
    /// that acts on `.connected` works whenever it starts.
    func makeEventStream(buffering: StreamBuffering? = nil) -> AsyncStream<WebSocketEvent> {
        state.locked { state in
            let open: WebSocketEvent? = if case .connected(let chosen) = state.publicState { .connected(protocol: chosen) } else { nil }
            return events.makeStream(startingWith: open, buffering: buffering)
        }
    }

    func makeStateStream() -> AsyncStream<WebSocketState> {
        state.locked { states.makeStream(startingWith: $0.publicState) }
    }

    // MARK: Requests

    var lifecycleBox: NIOLockedValueBox<State> { state }
    var logger: Logger { configuration.logger }

    func connect() async throws {
        try await requestConnect()
    }

    func disconnect(code: WebSocketCloseCode, reason: String) async {
        await requestDisconnect(code: code, reason: reason)
    }

    func terminate() {
        requestTerminate()
    }

    func connectError(_ failure: Lifecycle.Failure, atOnce: Bool) -> any Error {
        switch (failure, atOnce) {
        case (.disconnected, true): WebSocketError(.notConnected, "a disconnect is under way; await it, then connect")
        case (.terminated, true): WebSocketError(.terminated, "the socket was terminated and cannot connect again")
        default: failure.error
        }
    }

    private enum SendOutcome {
        case done
        case waitForDrain
        case fail(any Error)
    }

    /// Hands `message` to the connection's outbound buffer, or to the reconnection queue; waits
    /// only while the buffer is above its high watermark.
    func send(_ message: WebSocketMessage) async throws {
        // Counted once the lock is released: the metrics backend is not our code.
        var (written, queued) = (false, false)
        let outcome: SendOutcome = state.locked { state in
            if let failure = state.sendFailure {
                state.sendFailure = nil
                return .fail(failure)
            }
            switch state.lifecycle.send(message) {
            case .write:
                guard let current = state.connection?.connection else {
                    return .fail(WebSocketError(.notConnected, "the connection is gone"))
                }
                written = true
                return accept(message, on: current, in: &state)
            case .queued:
                queued = true
                return .done
            case .queueFull:
                let limit = state.lifecycle.policy.maxQueued
                return .fail(WebSocketError(.sendQueueFull, "\(limit) sends already wait for the connection"))
            case .notConnected:
                return .fail(WebSocketError(.notConnected, "the socket is not connected; call connect() first"))
            case .terminated:
                return .fail(WebSocketError(.terminated, "the socket was terminated"))
            }
        }
        if written { metrics.sent(bytes: message.byteCount) }
        if queued { metrics.queued() }
        switch outcome {
        case .done: return
        case .waitForDrain: await waitForDrain()
        case .fail(let error): throw error
        }
    }

    /// Writes a message on the connection of `generation` only, at once: never queued, never
    /// written on a later connection, never waiting for the outbound buffer to drain.
    /// - Returns: false when that connection is not the open one.
    func write(_ message: WebSocketMessage, onConnection generation: UInt64) -> Bool {
        let written = state.locked { state in
            guard state.lifecycle.openGeneration == generation, let current = state.connection, current.generation == generation else {
                return false
            }
            _ = accept(message, on: current.connection, in: &state)
            return true
        }
        if written { metrics.sent(bytes: message.byteCount) }
        return written
    }

    private func accept(_ message: WebSocketMessage, on connection: any WebSocketTransportConnection, in state: inout State) -> SendOutcome {
        guard connection.write(message) else { return .done }
        state.aboveHighWatermark = true
        return .waitForDrain
    }

    /// Returns once the outbound buffer drained, the connection ended, or the task is cancelled.
    private func waitForDrain() async {
        try? await state.wait(in: \.drainWaiters) { state in
            guard state.aboveHighWatermark else { return .success(()) }
            state.sendSuspensions += 1
            state.resume(state.suspensionWatchers.takeAll(), with: .success(()))
            return nil
        }
    }

    /// How many times a send waited for the outbound buffer to drain.
    package var sendSuspensions: Int { state.locked { $0.sendSuspensions } }

    /// Returns once a send has waited for the outbound buffer to drain (for tests: wrap it in a
    /// timeout).
    package func waitUntilSendSuspended() async {
        try? await state.wait(in: \.suspensionWatchers) { $0.sendSuspensions > 0 ? .success(()) : nil }
    }

    /// Waits until every message sent so far on the open connection is written to the network.
    func flush() async throws {
        let connection: any WebSocketTransportConnection = try state.locked { state in
            if let failure = state.sendFailure {
                state.sendFailure = nil
                throw failure
            }
            guard state.lifecycle.openGeneration != nil, let current = state.connection?.connection else {
                let queued = state.lifecycle.queuedCount
                throw WebSocketError(
                    .notConnected,
                    queued > 0 ? "not connected: \(queued) queued message\(queued == 1 ? " waits" : "s wait") for the reconnection" : "not connected"
                )
            }
            return current
        }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            connection.flush { continuation.resume(with: $0) }
        }
    }

    /// Resumes every send waiting for the buffer to drain.
    func releaseDrainWaiters(in state: inout State) {
        state.aboveHighWatermark = false
        state.resume(state.drainWaiters.takeAll(), with: .success(()))
    }

    /// Sends one ping now and waits for its pong.
    func ping(timeout: Duration) async throws -> Duration {
        let payload: [UInt8] = state.locked { state in
            state.manualPingCount += 1
            return Array("duplex-ping-\(state.manualPingCount)-\(UInt32.random(in: .min ... .max))".utf8)
        }
        return try await withDeadline(timeout, clock: clock, orThrow: { WebSocketError(.pingFailed, "no pong within \(timeout)") }) {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Duration, any Error>) in
                    self.state.locked { state in
                        guard state.lifecycle.openGeneration != nil, let connection = state.connection?.connection else {
                            continuation.resume(throwing: WebSocketError(.notConnected, "ping needs an open connection"))
                            return
                        }
                        state.manualPings[payload] = (self.reading.now(), continuation)
                        connection.ping(payload)
                    }
                }
            } onCancel: {
                self.state.locked { $0.manualPings.removeValue(forKey: payload) }?
                    .continuation.resume(throwing: CancellationError())
            }
        }
    }

    /// The network path changed or the app resumed: checks the open connection with a ping
    /// that must be answered within `deadline`, and drops it and reconnects at once (the backoff
    /// reset) when it is not; a reconnection that was waiting starts now. True when the
    /// connection answered, or there was none to check.
    ///
    /// Only the pong counts: messages that arrive meanwhile may have been on their way before
    /// the path changed. Reads held back for a slow reader excuse a late pong, which may sit
    /// unread behind them.
    func checkConnection(within deadline: Duration) async -> Bool {
        let decision = state.locked { state -> ConnectionLifecycle<WebSocketPolicy>.CheckDecision in
            let decision = state.lifecycle.networkChanged()
            if case .reconnectNow(let actions) = decision {
                let logger = configuration.logger
                state.afterUnlock.append { logger.info("the network changed: reconnecting now") }
                perform(actions, in: &state)
            }
            return decision
        }
        guard case .probe(let generation) = decision else { return true }
        do {
            _ = try await ping(timeout: deadline)
            return true
        } catch {
            return state.locked { state in
                guard gate.isOpen else { return true }
                let loss = WebSocketLoss.failed(WebSocketError(.pingFailed, "no pong within \(deadline) after the network changed"))
                let logger = configuration.logger
                state.afterUnlock.append { logger.info("the network changed and the connection did not answer: reconnecting now") }
                perform(state.lifecycle.checkFailed(generation: generation, loss: loss), in: &state)
                return false
            }
        }
    }
}
