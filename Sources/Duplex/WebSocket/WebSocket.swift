public import DuplexSchema
public import Foundation

/// A WebSocket client: connect, send, receive, keep-alive pings, automatic reconnection with a
/// bounded send queue, and clean termination. Works on Linux and Apple platforms over SwiftNIO.
///
/// ```swift
/// let socket = WebSocket(
///     url: URL(string: "ws://127.0.0.1:8080/echo")!,
///     configuration: .init(
///         ping: PingConfig(pingInterval: .seconds(15), maxPingFailures: 2),
///         reconnection: .exponentialBackoff(maxAttempts: 10)
///     )
/// )
/// try await socket.connect()
/// try await socket.send("hello")
/// for await message in socket.messages {
///     print(message.text ?? "\(message.data.count) bytes")
/// }
/// ```
///
/// Lifecycle:
/// - ``connect()`` opens a connection and returns when it is open; on a connected socket it
///   returns at once. It throws ``WebSocketError`` when the attempt fails (a failed first attempt
///   is not retried; reconnection applies to connections that were open).
/// - ``disconnect(code:reason:)`` closes with a close frame and waits for the handshake. The
///   streams stay open and ``connect()`` works again. On a disconnected socket it does nothing.
/// - ``reconnect()`` opens a fresh connection with the same request; on a connected socket it
///   returns at once.
/// - ``terminate()`` closes, finishes every stream, and makes the socket unusable. So does
///   releasing the last reference to it.
/// - Errors are destructive: a protocol violation, a failed write or a ping failure tears the
///   connection down and is reported in ``events`` and ``state``.
///
/// With a ``ReconnectionStrategy`` other than `.none`, a connection lost to anything but
/// ``disconnect(code:reason:)``, ``stop()``, ``terminate()`` or a 1000 close from the peer is
/// reopened after the strategy's delay, and sends made meanwhile wait in a bounded queue that is
/// written, in order, first thing on the new connection.
///
/// Sending is pipelined: ``send(_:)`` returns once the message is in the connection's outbound
/// buffer, which the event loop writes in batches, one flush per batch. Above
/// ``WebSocketConfiguration/sendBufferHighWatermark`` bytes not yet written, `send` waits for
/// the buffer to drain: nothing is dropped and memory stays bounded. ``flush()`` waits until
/// everything sent so far is written. If the connection ends before some accepted messages were
/// written, they are not resent (nothing arrives twice): an ``WebSocketEvent/error(_:)`` event
/// says how many, and the next `send` or `flush` throws it.
///
/// Streams: ``events``, ``messages``, ``stateEvents`` and ``pingRoundTrips`` give each caller its
/// own stream, and every element reaches every stream, in order. ``messages`` and ``events`` are
/// lossless by default (``StreamBuffering/lossless``): when a reader falls behind by
/// ``WebSocketConfiguration/streamBufferLimit`` elements or
/// ``WebSocketConfiguration/streamBufferBytes`` bytes, the socket stops reading from the
/// network, so TCP holds the server back, and reads again once the reader has caught up by half.
/// Ask for ``messages(buffering:)`` or ``events(buffering:)`` with ``StreamBuffering/newest(_:)``
/// for a reader that wants only the latest values. ``stateEvents`` and ``pingRoundTrips`` are
/// status streams: they keep the newest elements and never hold the connection back.
public final class WebSocket: WebSocketProtocol {
    let core: WebSocketCore

    /// The request this socket connects with.
    public var request: WebSocketRequest { core.request }
    /// The configuration it was created with.
    public var configuration: WebSocketConfiguration { core.configuration }

    /// Creates a socket for `url`. Nothing connects until ``connect()``.
    public convenience init(url: URL, configuration: WebSocketConfiguration = .init()) {
        self.init(request: WebSocketRequest(url: url), configuration: configuration)
    }

    /// Creates a socket for a URL string, as seed code writes it. A malformed URL, or one that
    /// is not `ws://` or `wss://`, makes ``connect()`` throw ``WebSocketError`` with code
    /// ``WebSocketError/Code/invalidURL``.
    public convenience init(url: String, configuration: WebSocketConfiguration = .init()) {
        self.init(request: WebSocketRequest(url: url), configuration: configuration)
    }

    /// Creates a socket for a URL string with a ping configuration, as seed 004 does.
    public convenience init(url: String, pingConfig: PingConfig) {
        self.init(url: url, configuration: .init(ping: pingConfig))
    }

    /// Creates a socket for a request with subprotocols and headers.
    public convenience init(request: WebSocketRequest, configuration: WebSocketConfiguration = .init()) {
        self.init(request: request, configuration: configuration, clock: ContinuousClock())
    }

    /// Creates a socket whose ping and reconnect timers run on `clock`.
    public init(request: WebSocketRequest, configuration: WebSocketConfiguration, clock: some Clock<Duration>) {
        self.core = WebSocketCore(request: request, configuration: configuration, clock: clock)
    }

    /// Creates a socket whose losses are retried as `policy` says (``ChatClient``'s socket).
    init(request: WebSocketRequest, configuration: WebSocketConfiguration, clock: any Clock<Duration>, policy: WebSocketPolicy) {
        self.core = WebSocketCore(request: request, configuration: configuration, clock: clock, policy: policy)
    }

    /// Creates a socket with a ping configuration, as seed 004 does.
    public convenience init(url: URL, pingConfig: PingConfig) {
        self.init(url: url, configuration: .init(ping: pingConfig))
    }

    /// Creates a socket for a request with a ping configuration, as seed 004 does.
    public convenience init(request: WebSocketRequest, pingConfig: PingConfig) {
        self.init(request: request, configuration: .init(ping: pingConfig))
    }

    deinit {
        core.terminate()
    }

    public var state: WebSocketState { core.currentState }

    /// A new stream of every event from now on; each consumer gets its own. When the socket is
    /// connected, the stream starts with ``WebSocketEvent/connected(protocol:)``, so a loop that
    /// greets the server on `.connected` works whenever it starts.
    public var events: AsyncStream<WebSocketEvent> { core.makeEventStream() }

    public var messages: AsyncStream<WebSocketMessage> { core.messages.makeStream() }

    /// A new stream of every event from now on, buffered as `buffering` says.
    public func events(buffering: StreamBuffering) -> AsyncStream<WebSocketEvent> {
        core.makeEventStream(buffering: buffering)
    }

    /// A new stream of every message from now on, buffered as `buffering` says: with
    /// ``StreamBuffering/newest(_:)``, a slow reader sees the latest messages and never holds the
    /// socket back.
    public func messages(buffering: StreamBuffering) -> AsyncStream<WebSocketMessage> {
        core.messages.makeStream(buffering: buffering)
    }

    public var stateEvents: AsyncStream<WebSocketState> { core.makeStateStream() }

    /// Each measured ping round-trip time, from now on.
    public var pingRoundTrips: AsyncStream<Duration> { core.roundTrips.makeStream() }

    /// The last measured ping round-trip time, if a pong has come back.
    public var pingRoundTripTime: Duration? { core.roundTripTime }

    /// The subprotocol the server chose on the current connection, if any.
    public var negotiatedProtocol: String? {
        if case .connected(let chosen) = state { return chosen }
        return nil
    }

    /// The extensions the server enabled on the current connection (its
    /// `Sec-WebSocket-Extensions`, such as `permessage-deflate; server_max_window_bits=12`), if any.
    public var negotiatedExtensions: String? { core.negotiatedExtensions }

    /// How many sends wait for a reconnection.
    public var queuedSendCount: Int { core.queuedSendCount }

    /// Called when `maxPingFailures` pings in a row went unanswered, before reconnection.
    public var onPingFailed: (@Sendable (WebSocketError) -> Void)? {
        get { core.onPingFailed }
        set { core.onPingFailed = newValue }
    }

    /// Called before each connection attempt, the first and every reconnection, to rebuild the
    /// request: to refresh a token, or to resume a chat with `since=` the last seq seen.
    ///
    /// ```swift
    /// socket.prepareRequest = { request in
    ///     var request = request
    ///     request.url = chatURL(since: lastSeq.withLock { $0 })
    ///     return request
    /// }
    /// ```
    public var prepareRequest: (@Sendable (WebSocketRequest) async -> WebSocketRequest)? {
        get { core.prepareRequest }
        set { core.prepareRequest = newValue }
    }

    /// The app's own handshake, run on every connection (the first and each reconnection) once
    /// the WebSocket handshake is done and before the socket is reported connected: what it
    /// sends goes out before the sends queued while reconnecting, and what it receives is taken
    /// before the streams see it (``WebSocketPreamble``). When it throws, or waits in vain, the
    /// connection is dropped and counts as a failed attempt (``WebSocketError/Code/preambleFailed``):
    /// `connect()` throws it for the first connection, and a reconnection is retried per the
    /// strategy.
    ///
    /// ```swift
    /// socket.preamble = { connection in
    ///     connection.send(#"{"type":"hello","token":"\(token())"}"#)
    ///     let welcome = try await connection.receive(timeout: .seconds(5))
    ///     guard welcome.text?.contains("welcome") == true else { throw HandshakeRefused() }
    /// }
    /// ```
    public var preamble: (@Sendable (WebSocketPreamble) async throws -> Void)? {
        get { core.preamble }
        set { core.preamble = newValue }
    }

    /// Opens the connection, and returns once it is open (after the ``preamble``, if any).
    ///
    /// One attempt: a failure throws a ``WebSocketError`` that says what went wrong (a refused
    /// TCP connection, a TLS failure, a timeout, an answer other than 101 with its ``WebSocketError/status``).
    /// One answer is waited through: a server that refuses the upgrade with 429 or 503 and a
    /// `Retry-After` is asked again after that wait, as it asked, when
    /// ``WebSocketConfiguration/reconnection`` is set: the wait is clamped to the strategy's
    /// delays, counts as one of its attempts, and `connect()` returns once an attempt opens or
    /// throws once the strategy gives up. Without a strategy it throws
    /// ``WebSocketError/Code/upgradeRejected`` with the ``WebSocketError/status``, the
    /// ``WebSocketError/retryAfter`` and the first bytes of the ``WebSocketError/body``.
    ///
    /// Calling it while connected returns at once; while an attempt is under way, it waits for
    /// that attempt. Once the connection is open, its losses are retried as the strategy says.
    /// - Throws: ``WebSocketError``; ``WebSocketError/Code/terminated`` after ``terminate()``.
    public func connect() async throws {
        try await core.connect()
    }

    public func disconnect(code: WebSocketCloseCode = .normalClosure, reason: String = "") async {
        await core.disconnect(code: code, reason: reason)
    }

    /// Opens a fresh connection with the same request; returns at once when connected.
    /// - Returns: this socket.
    @discardableResult
    public func reconnect() async throws -> WebSocket {
        try await core.connect()
        return self
    }

    public func terminate() async {
        core.terminate()
    }

    /// Ends automatic reconnection and closes the connection, without waiting: the same as
    /// ``close(code:reason:)`` with 1000.
    public func stop() {
        close()
    }

    /// Starts closing with a close frame and returns at once: from now on the socket neither
    /// sends nor reconnects, and the close handshake goes on in the background (seed 001's
    /// `close`). ``disconnect(code:reason:)`` is the same, awaited.
    public func close(code: WebSocketCloseCode = .normalClosure, reason: String = "") {
        core.startDisconnect(code: code, reason: reason)
    }

    /// Sends one ping now, with a payload of its own, and returns the time until its pong.
    ///
    /// This is independent of the keep-alive pings of ``WebSocketConfiguration/ping``: a missing
    /// answer throws here and does not count as a ping failure.
    /// - Throws: ``WebSocketError``: ``WebSocketError/Code/notConnected`` when the socket is not
    ///   connected, ``WebSocketError/Code/pingFailed`` when no pong came within `timeout`.
    public func ping(timeout: Duration = .seconds(10)) async throws -> Duration {
        try await core.ping(timeout: timeout)
    }

    /// Checks the connection at once, because the network path changed (Wi-Fi to cellular, a
    /// VPN, a network that came back) or the app resumed from the background, when open
    /// connections are often half-open: nothing arrives and nothing fails, no FIN and no RST.
    ///
    /// An open connection is sent a ping that must be answered within `deadline`; when it is not,
    /// the connection is dropped and, when the
    /// ``WebSocketConfiguration/reconnection`` strategy retries, a new one is opened at once, with
    /// the backoff reset, not after the next keep-alive ping and its misses. A reconnection that
    /// was waiting out a backoff starts now. Sends made while reconnecting go out on the new
    /// connection; a message sent on the half-open connection before the check is lost with it,
    /// as over any dead connection (``ChatClient`` resends what was not acknowledged).
    /// Call it from `NWPathMonitor`'s update handler or when `scenePhase` becomes `.active`:
    ///
    /// ```swift
    /// monitor.pathUpdateHandler = { _ in Task { await socket.checkConnection() } }
    /// ```
    /// - Parameter deadline: how long the pong may take. Default 2 s.
    /// - Returns: true when the connection answered (or there was none to check); false when it
    ///   was found dead and a reconnection started.
    @discardableResult
    public func checkConnection(within deadline: Duration = .seconds(2)) async -> Bool {
        await core.checkConnection(within: deadline)
    }

    /// Sends a message: returns once it is in the connection's outbound buffer, before it is
    /// written, and waits only while that buffer is above
    /// ``WebSocketConfiguration/sendBufferHighWatermark``. While reconnecting, it is queued and
    /// this returns at once. Messages are written in the order `send` is called.
    /// - Throws: ``WebSocketError``: ``WebSocketError/Code/notConnected`` when the socket is not
    ///   connected or reconnecting, ``WebSocketError/Code/sendQueueFull`` when the queue is full,
    ///   ``WebSocketError/Code/terminated`` after ``terminate()``, or
    ///   ``WebSocketError/Code/connectionLost`` when messages sent earlier were not written
    ///   before their connection ended (this message is then not sent).
    public func send(_ message: WebSocketMessage) async throws {
        try await core.send(message)
    }

    /// Waits until every message sent so far is written to the network. Written is not
    /// received: for end-to-end delivery, have the peer acknowledge (as ``ChatClient`` does).
    /// - Throws: ``WebSocketError``: ``WebSocketError/Code/notConnected`` when the socket is not
    ///   connected (messages queued for a reconnection are not written yet), or
    ///   ``WebSocketError/Code/connectionLost`` when the connection ended first.
    public func flush() async throws {
        try await core.flush()
    }

    // MARK: For clients built on the socket

    /// A new stream of messages with their connection, and of losses with whether the socket
    /// reconnects, in the order they happened (for ``ChatClient``).
    package var reports: AsyncStream<ConnectionReport> { core.reports.makeStream() }

    /// Writes `message` on the connection of `connection` only, at once: never queued, never
    /// written on a later connection, never waiting for the outbound buffer to drain.
    /// - Returns: false when that connection is not the open one.
    @discardableResult
    package func write(_ message: WebSocketMessage, onConnection connection: UInt64) -> Bool {
        core.write(message, onConnection: connection)
    }

    /// The connection of `connection` proved itself (a chat welcome): the backoff starts over,
    /// and its loss is retried whatever its close code.
    package func proved(connection: UInt64) {
        core.proved(generation: connection)
    }

    /// Terminates at once, without waiting (for an owner's `deinit`).
    package func terminateNow() {
        core.terminate()
    }

    /// The clock the socket's timers run on.
    package var clock: any Clock<Duration> { core.clock }
}
