public import DuplexSchema
import Foundation
public import Logging

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
///
/// It runs the same core and lifecycle as a ``WebSocket``, with a policy of its own (`connect()`
/// waits through failed attempts, a 1000 is retried) and a transport whose connections are the
/// sockets `connect` makes.
public final class ReconnectingWebSocket: WebSocketProtocol {
    private let core: WebSocketCore
    /// When and how often it reconnects.
    public let strategy: ReconnectionStrategy
    /// The most sends kept while reconnecting.
    public let maxQueuedSends: Int
    /// Closed while a reader of ``events`` or ``messages`` is behind: the current socket then
    /// holds back its reads and memory stays bounded.
    package var gate: DemandGate { core.gate }

    /// Creates the wrapper; nothing connects until ``start()`` or ``connect()``.
    /// - Parameters:
    ///   - connect: makes the socket for each connection (it may already be connecting).
    ///   - strategy: the delays between connections; `.exponentialBackoff()` by default.
    ///   - maxQueuedSends: the most sends kept while reconnecting (1,000 by default).
    ///   - streamBufferLimit: how many unread elements a reader of ``events`` or ``messages``
    ///     may hold (also at most 8 MiB of messages) before forwarding waits and the socket
    ///     stops reading (65,536 by default).
    ///   - logger: where reconnections are logged.
    public convenience init(
        connect: @escaping @Sendable () -> any WebSocketProtocol,
        strategy: ReconnectionStrategy = .exponentialBackoff(),
        maxQueuedSends: Int = 1000,
        streamBufferLimit: Int = 65_536,
        logger: Logger = Logger(label: "duplex.reconnecting-websocket")
    ) {
        self.init(
            connect: connect, strategy: strategy, maxQueuedSends: maxQueuedSends, streamBufferLimit: streamBufferLimit, logger: logger,
            clock: ContinuousClock())
    }

    /// Creates the wrapper with the strategy's delays on `clock`: a test's clock, such as
    /// DuplexTesting's `TestClock` (give the sockets `connect` makes the same clock).
    public init(
        connect: @escaping @Sendable () -> any WebSocketProtocol,
        strategy: ReconnectionStrategy = .exponentialBackoff(),
        maxQueuedSends: Int = 1000,
        streamBufferLimit: Int = 65_536,
        logger: Logger = Logger(label: "duplex.reconnecting-websocket"),
        clock: some Clock<Duration>
    ) {
        self.strategy = strategy
        self.maxQueuedSends = maxQueuedSends
        let configuration = WebSocketConfiguration(
            reconnection: strategy,
            maxQueuedSends: maxQueuedSends,
            streamBufferLimit: streamBufferLimit,
            transport: .custom { SocketFactoryTransport(factory: connect, clock: clock) },
            logger: logger
        )
        let policy = WebSocketPolicy(strategy: strategy, maxQueued: maxQueuedSends, connectRetries: true, retriesNormalClosure: true)
        // The request is the factory's to make, socket by socket: the core's is never used.
        let request = WebSocketRequest(url: URL(string: "ws://127.0.0.1/")!)
        self.core = WebSocketCore(request: request, configuration: configuration, clock: clock, policy: policy)
    }

    deinit {
        core.terminate()
    }

    /// The wrapper's state: `connecting` between connections, `disconnected` once it stopped.
    public var state: WebSocketState { core.currentState }

    /// How many messages wait unread, over every ``messages`` stream (for tests).
    package var unreadMessages: Int { core.messages.bufferedCount }
    /// A new stream of every event from now on; it starts with `.connected` when a connection
    /// is open.
    public var events: AsyncStream<WebSocketEvent> { core.makeEventStream() }
    /// A new stream of every message, over every connection, from now on.
    public var messages: AsyncStream<WebSocketMessage> { core.messages.makeStream() }
    /// A new stream of the current state, then every change.
    public var stateEvents: AsyncStream<WebSocketState> { core.makeStateStream() }

    /// Connects, and keeps reconnecting until ``stop()``; returns when it stops for good.
    public func start() async {
        let states = core.makeStateStream()
        core.startConnecting()
        for await _ in states where core.hasEnded { return }
    }

    /// Starts connecting (as ``start()`` does, in the background) and returns once connected.
    /// - Throws: ``WebSocketError``: the strategy gave up first, or the wrapper was stopped.
    public func connect() async throws {
        try await core.connect()
    }

    /// Stops reconnecting and closes the connection, without waiting.
    public func stop() {
        close()
    }

    /// Stops reconnecting and starts closing the current connection, without waiting.
    public func close(code: WebSocketCloseCode = .normalClosure, reason: String = "") {
        core.startDisconnect(code: code, reason: reason)
    }

    /// Stops reconnecting and closes the current connection; ``start()`` or ``connect()``
    /// starts again.
    public func disconnect(code: WebSocketCloseCode, reason: String) async {
        await core.disconnect(code: code, reason: reason)
    }

    /// Stops for good: closes the current connection and finishes every stream.
    public func terminate() async {
        core.terminate()
    }

    /// The app's own handshake, run on every connection before the queued sends go out; see
    /// ``WebSocket/preamble``.
    public var preamble: (@Sendable (WebSocketPreamble) async throws -> Void)? {
        get { core.preamble }
        set { core.preamble = newValue }
    }

    /// Checks the connection at once because the network path changed or the app resumed,
    /// and reconnects now, the backoff reset, when it does not answer within `deadline`; a
    /// reconnection waiting out a backoff starts now. See ``WebSocket/checkConnection(within:)``.
    /// - Returns: true when the connection answered (or there was none to check).
    @discardableResult
    public func checkConnection(within deadline: Duration = .seconds(2)) async -> Bool {
        await core.checkConnection(within: deadline)
    }

    /// Sends one ping now and returns the time until its pong; see ``WebSocket/ping(timeout:)``.
    public func ping(timeout: Duration = .seconds(10)) async throws -> Duration {
        try await core.ping(timeout: timeout)
    }

    /// Waits until every message sent so far is written; see ``WebSocket/flush()``.
    public func flush() async throws {
        try await core.flush()
    }

    /// Called when the keep-alive pings failed and the connection was dropped for it; see
    /// ``WebSocket/onPingFailed``.
    public var onPingFailed: (@Sendable (WebSocketError) -> Void)? {
        get { core.onPingFailed }
        set { core.onPingFailed = newValue }
    }

    /// Sends on the current connection, or queues the message while reconnecting.
    /// - Throws: ``WebSocketError``: ``WebSocketError/Code/sendQueueFull`` when the queue is
    ///   full, ``WebSocketError/Code/notConnected`` when stopped or never started.
    public func send(_ message: WebSocketMessage) async throws {
        try await core.send(message)
    }
}
