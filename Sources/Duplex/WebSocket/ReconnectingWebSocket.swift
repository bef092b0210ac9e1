public import DuplexSchema
public import Logging
import NIOConcurrencyHelpers

/// Seed 001's reconnecting wrapper: a fresh socket from `connect` for every connection, with
/// the strategy's delays in between, and sends queued while reconnecting.
///
/// ```swift
/// let ws = ReconnectingWebSocket(
///     connect: { WebSocket(request: WebSocketRequest(url: chatURL, additionalHeaders: ["Authorization": "Bearer \(token())"])) },
///     strategy: .exponentialBackoff(baseDelay: 1.0, maxDelay: 30.0, maxAttempts: 10)
/// )
/// Task { await ws.start() }
/// for await event in ws.events { … }     // .connected after every (re)connection
/// try await ws.send(.string("hello"))    // queued while reconnecting
/// ws.stop()
/// ```
///
/// Use it when each connection needs a freshly built socket (a new token in its headers, a
/// new URL). Otherwise a ``WebSocket`` with ``WebSocketConfiguration/reconnection`` does the
/// same on one object, and resumes its queue on the same socket. The sockets `connect` returns
/// should not reconnect on their own: this wrapper does it. It reconnects after any loss that
/// ``stop()``, ``disconnect(code:reason:)`` or ``terminate()`` did not cause, including a 1000
/// from the server, until the strategy gives up. A send queued when it stops for good is
/// reported in an ``WebSocketEvent/error(_:)`` event, never dropped silently. Its streams are
/// lossless and bounded as a ``WebSocket``'s are: a reader that falls behind holds the
/// connection back.
public final class ReconnectingWebSocket: WebSocketProtocol {
    private let factory: @Sendable () -> any WebSocketProtocol
    /// When and how often it reconnects.
    public let strategy: ReconnectionStrategy
    /// The most sends kept while reconnecting.
    public let maxQueuedSends: Int
    private let logger: Logger
    private let events_: Broadcaster<WebSocketEvent>
    private let messages_: Broadcaster<WebSocketMessage>
    /// Closed while a reader of ``events`` or ``messages`` is behind: forwarding then waits, so
    /// the current socket holds back its reads and memory stays bounded.
    package let gate = DemandGate()
    private let states: Broadcaster<WebSocketState>

    private struct State {
        var state: WebSocketState = .notConnected
        var current: (any WebSocketProtocol)?
        var loop: Task<Void, Never>?
        var stopped = false
        var terminated = false
        var queue: [WebSocketMessage] = []
        var connectWaiters: [CheckedContinuation<Void, any Error>] = []
    }

    private let box = NIOLockedValueBox(State())

    /// Creates the wrapper; nothing connects until ``start()`` or ``connect()``.
    /// - Parameters:
    ///   - connect: makes the socket for each connection (it may already be connecting).
    ///   - strategy: the delays between connections; `.exponentialBackoff()` by default.
    ///   - maxQueuedSends: the most sends kept while reconnecting (1,000 by default).
    ///   - streamBufferLimit: how many unread elements a reader of ``events`` or ``messages``
    ///     may hold (also at most 8 MiB of messages) before forwarding waits and the socket
    ///     stops reading (65,536 by default).
    ///   - logger: where reconnections are logged.
    public init(
        connect: @escaping @Sendable () -> any WebSocketProtocol,
        strategy: ReconnectionStrategy = .exponentialBackoff(),
        maxQueuedSends: Int = 1000,
        streamBufferLimit: Int = 65_536,
        logger: Logger = Logger(label: "duplex.reconnecting-websocket")
    ) {
        self.factory = connect
        self.strategy = strategy
        self.maxQueuedSends = maxQueuedSends
        self.logger = logger
        self.events_ = Broadcaster(
            limit: streamBufferLimit,
            byteLimit: 8 * 1024 * 1024,
            cost: { event in if case .message(let message) = event { message.byteCount } else { 0 } },
            gate: gate,
            label: "events",
            logger: logger
        )
        self.messages_ = Broadcaster(limit: streamBufferLimit, byteLimit: 8 * 1024 * 1024, cost: { $0.byteCount }, gate: gate, label: "messages", logger: logger)
        self.states = Broadcaster(limit: 1_024, buffering: .newest(1_024), label: "stateEvents", logger: logger)
    }

    deinit {
        box.withLockedValue { $0.loop }?.cancel()
    }

    /// The wrapper's state: `connecting` between connections, `disconnected` once it stopped.
    public var state: WebSocketState { box.withLockedValue { $0.state } }

    /// How many messages wait unread, over every ``messages`` stream (for tests).
    package var unreadMessages: Int { messages_.bufferedCount }
    /// A new stream of every event from now on; it starts with `.connected` when a connection
    /// is open.
    public var events: AsyncStream<WebSocketEvent> {
        box.withLockedValue { state in
            let open: WebSocketEvent? = if case .connected(let chosen) = state.state { .connected(protocol: chosen) } else { nil }
            return events_.makeStream(startingWith: open)
        }
    }
    /// A new stream of every message, over every connection, from now on.
    public var messages: AsyncStream<WebSocketMessage> { messages_.makeStream() }
    /// A new stream of the current state, then every change.
    public var stateEvents: AsyncStream<WebSocketState> {
        box.withLockedValue { states.makeStream(startingWith: $0.state) }
    }

    /// Connects, and keeps reconnecting until ``stop()``; returns when it stops for good.
    public func start() async {
        await ensureRunning()?.value
    }

    /// Starts connecting (as ``start()`` does, in the background) and returns once connected.
    /// - Throws: ``WebSocketError``: the strategy gave up first, or the wrapper was stopped.
    public func connect() async throws {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let connected = box.withLockedValue { state -> Bool in
                if case .connected = state.state { return true }
                state.connectWaiters.append(continuation)
                return false
            }
            if connected {
                continuation.resume()
            } else {
                ensureRunning()
            }
        }
    }

    /// Stops reconnecting and closes the connection, without waiting.
    public func stop() {
        close()
    }

    /// Stops reconnecting and starts closing the current connection, without waiting.
    public func close(code: WebSocketCloseCode = .normalClosure, reason: String = "") {
        let current = halt()
        current?.close(code: code, reason: reason)
    }

    /// Stops reconnecting and closes the current connection; ``start()`` or ``connect()``
    /// starts again.
    public func disconnect(code: WebSocketCloseCode, reason: String) async {
        let current = halt()
        await current?.disconnect(code: code, reason: reason)
    }

    /// Stops for good: closes the current connection and finishes every stream.
    public func terminate() async {
        let current = box.withLockedValue { state in
            state.terminated = true
            return state.current
        }
        _ = halt()
        await current?.terminate()
        box.withLockedValue { $0.loop }?.cancel()
        publish(.disconnected(.terminated))
        events_.finish()
        messages_.finish()
        states.finish()
    }

    /// Sends on the current connection, or queues the message while reconnecting.
    /// - Throws: ``WebSocketError``: ``WebSocketError/Code/sendQueueFull`` when the queue is
    ///   full, ``WebSocketError/Code/notConnected`` when stopped or never started.
    public func send(_ message: WebSocketMessage) async throws {
        enum Route { case socket(any WebSocketProtocol), queued }
        let route: Route = try box.withLockedValue { state in
            if state.terminated { throw WebSocketError(.terminated, "the socket was terminated") }
            if state.stopped || state.loop == nil { throw WebSocketError(.notConnected, "not started, or stopped: call start() or connect() first") }
            if case .connected = state.state, let current = state.current { return .socket(current) }
            guard state.queue.count < maxQueuedSends else {
                throw WebSocketError(.sendQueueFull, "\(maxQueuedSends) sends already wait for the reconnection")
            }
            state.queue.append(message)
            return .queued
        }
        if case .socket(let socket) = route { try await socket.send(message) }
    }

    // MARK: The loop

    /// Marks the wrapper stopped and returns the current socket.
    private func halt() -> (any WebSocketProtocol)? {
        let (current, waiters, dropped) = box.withLockedValue { state in
            state.stopped = true
            defer {
                state.connectWaiters = []
                state.queue = []
            }
            return (state.current, state.connectWaiters, state.queue.count)
        }
        for waiter in waiters { waiter.resume(throwing: WebSocketError(.notConnected, "stopped before a connection opened")) }
        reportDropped(dropped, because: "the socket was stopped")
        publish(.disconnected(.manuallyDisconnected))
        return current
    }

    @discardableResult
    private func ensureRunning() -> Task<Void, Never>? {
        box.withLockedValue { state in
            if state.loop == nil, !state.terminated {
                state.stopped = false
                state.loop = Task { [weak self] in await self?.run() }
            }
            return state.loop
        }
    }

    private var isStopped: Bool { box.withLockedValue { $0.stopped || $0.terminated } }

    private func run() async {
        var schedule = ReconnectionSchedule(strategy: strategy)
        while !isStopped, !Task.isCancelled {
            publish(.connecting)
            let socket = factory()
            let inner = socket.events
            box.withLockedValue { $0.current = socket }
            do {
                try await socket.connect()
                schedule.connectionProved()
                try await opened(socket)
                for await event in inner {
                    // A reader behind: wait, so the inner socket's own stream fills and it
                    // stops reading from the network (TCP holds the server back).
                    await gate.waitUntilOpen()
                    switch event {
                    case .connected: continue
                    case .message(let message):
                        messages_.yield(message)
                        events_.yield(event)
                    case .error:
                        events_.yield(event)
                    case .disconnected(let code, let reason):
                        events_.yield(event)
                        if !isStopped { publish(.disconnected(.closed(code: code ?? .abnormalClosure, reason: reason ?? ""))) }
                    }
                    if case .disconnected = event { break }
                }
            } catch {
                events_.yield(.error(error as? WebSocketError ?? WebSocketError(.connectionFailed, "\(error)")))
            }
            if isStopped { break }
            guard let (attempt, delay) = schedule.nextAttempt() else {
                let dropped = box.withLockedValue { state in
                    defer { state.queue = [] }
                    return state.queue.count
                }
                reportDropped(dropped, because: "reconnection gave up")
                publish(.disconnected(.reconnectionGaveUp(attempts: schedule.attempts)))
                failConnectWaiters(WebSocketError(.connectionFailed, "reconnection gave up after \(schedule.attempts) attempts"))
                break
            }
            logger.info("reconnecting", metadata: ["attempt": "\(attempt + 1)", "delay": "\(delay)"])
            guard (try? await Task.sleep(for: delay)) != nil else { break }
        }
        // A connect() that came while this loop was stopping starts the next one.
        let restart = box.withLockedValue { state -> Bool in
            state.loop = nil
            state.current = nil
            return !state.connectWaiters.isEmpty && !state.terminated
        }
        if restart { ensureRunning() }
    }

    /// A connection opened: flush the queue, then tell everyone.
    private func opened(_ socket: any WebSocketProtocol) async throws {
        while true {
            let next: WebSocketMessage? = box.withLockedValue { state in
                state.queue.isEmpty ? nil : state.queue.removeFirst()
            }
            guard let next else { break }
            do {
                try await socket.send(next)
            } catch {
                // Not sent: it goes back to the front, for the next connection.
                box.withLockedValue { $0.queue.insert(next, at: 0) }
                throw error
            }
        }
        let chosen: String? = if case .connected(let chosen) = socket.state { chosen } else { nil }
        let waiters = box.withLockedValue { state in
            state.state = .connected(protocol: chosen)
            states.yield(state.state)
            events_.yield(.connected(protocol: chosen))
            defer { state.connectWaiters = [] }
            return state.connectWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    private func failConnectWaiters(_ error: WebSocketError) {
        let waiters = box.withLockedValue { state in
            defer { state.connectWaiters = [] }
            return state.connectWaiters
        }
        for waiter in waiters { waiter.resume(throwing: error) }
    }

    private func publish(_ new: WebSocketState) {
        box.withLockedValue { state in
            guard state.state != new, state.state != .disconnected(.terminated) else { return }
            state.state = new
            states.yield(new)
        }
    }

    private func reportDropped(_ count: Int, because why: String) {
        guard count > 0 else { return }
        events_.yield(.error(WebSocketError(.notConnected, "\(count) queued message\(count == 1 ? " was" : "s were") not sent: \(why)")))
    }
}
