public import DuplexSchema
public import Foundation

/// What code using a WebSocket is written against: ``WebSocket`` conforms, and so does
/// `MockWebSocket` from `DuplexTesting`, so an app can be tested without sockets.
public protocol WebSocketProtocol: AnyObject, Sendable {
    /// The current state.
    var state: WebSocketState { get }
    /// A new stream of every event from now on; each consumer gets its own.
    var events: AsyncStream<WebSocketEvent> { get }
    /// A new stream of every message from now on; each consumer gets its own.
    var messages: AsyncStream<WebSocketMessage> { get }
    /// A new stream of the current state, then every change; each consumer gets its own.
    var stateEvents: AsyncStream<WebSocketState> { get }
    /// Connects; does nothing when already connected.
    func connect() async throws
    /// Closes the connection with a close frame; the streams stay open and `connect()` works
    /// again. Does nothing when not connected.
    func disconnect(code: WebSocketCloseCode, reason: String) async
    /// Closes the connection, finishes every stream, and prevents any reconnection.
    func terminate() async
    /// Sends a message.
    func send(_ message: WebSocketMessage) async throws
    /// Starts closing with a close frame and returns at once, as seed 001's `close` does; the
    /// close goes on in the background. ``disconnect(code:reason:)`` is the same, awaited.
    func close(code: WebSocketCloseCode, reason: String)
    /// Sends one ping now and returns the time until its pong (``WebSocket/ping(timeout:)``).
    func ping(timeout: Duration) async throws -> Duration
    /// Waits until every message sent so far is written (``WebSocket/flush()``).
    func flush() async throws
    /// Called when the keep-alive pings failed and the connection was dropped for it
    /// (``WebSocket/onPingFailed``).
    var onPingFailed: (@Sendable (WebSocketError) -> Void)? { get set }
}

extension WebSocketProtocol {
    /// A conformance of its own that does not ping: fails with
    /// ``WebSocketError/Code/pingFailed``, saying so.
    public func ping(timeout: Duration) async throws -> Duration {
        throw WebSocketError(.pingFailed, "\(Self.self) does not send pings")
    }

    /// A conformance of its own that does not buffer: nothing to wait for.
    public func flush() async throws {}

    /// A conformance of its own that does not ping never reports a ping failure.
    public var onPingFailed: (@Sendable (WebSocketError) -> Void)? {
        get { nil }
        set {}
    }

    /// Closes with 1000 (normal closure) and no reason.
    public func disconnect() async {
        await disconnect(code: .normalClosure, reason: "")
    }

    /// Starts closing with a close frame and returns at once (1000, no reason, by default):
    /// ``disconnect(code:reason:)`` without waiting for the close handshake.
    public func close(code: WebSocketCloseCode = .normalClosure, reason: String = "") {
        // Ends when the close handshake does (the close timeout bounds it).
        Task { await disconnect(code: code, reason: reason) }
    }

    /// Sends a text message.
    public func send(_ text: String) async throws {
        try await send(.string(text))
    }

    /// Sends a binary message.
    public func send(_ data: Data) async throws {
        try await send(.data(data))
    }

    /// Sends `value` encoded as JSON, in a text message.
    public func sendJSON(_ value: some Encodable, encoder: JSONEncoder = JSONEncoder()) async throws {
        try await send(try .json(value, encoder: encoder))
    }
}
