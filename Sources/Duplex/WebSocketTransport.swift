public import DuplexSchema

/// Opens WebSocket connections for a ``WebSocket``. The NIO transport is the default; a custom
/// one can stand in for tests (see `WebSocketConfiguration.transport`).
public protocol WebSocketTransport: Sendable {
    /// Opens a connection and completes the handshake.
    /// - Parameters:
    ///   - request: where to connect, subprotocols and headers.
    ///   - configuration: limits, timeouts and TLS trust.
    ///   - delegate: receives what arrives on the connection, from any thread, in order.
    /// - Returns: the open connection.
    /// - Throws: ``WebSocketError`` saying why no connection was made.
    func connect(
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) async throws -> any WebSocketTransportConnection
}

/// One open WebSocket connection of a transport.
///
/// The socket calls these methods while holding its lock: they must not call the delegate
/// before they return. Queue the work, and report through the delegate afterwards.
public protocol WebSocketTransportConnection: Sendable {
    /// The subprotocol the server chose, if any.
    var negotiatedProtocol: String? { get }
    /// Queues a message; `completion` runs once it is written, or with the error that stopped it.
    /// Messages are written in the order this is called.
    func write(_ message: WebSocketMessage, completion: (@Sendable (Result<Void, any Error>) -> Void)?)
    /// Sends a ping with this payload (at most 125 bytes).
    func ping(_ payload: [UInt8])
    /// Starts the close handshake; the connection ends when the peer answers or the close timeout passes.
    func close(code: WebSocketCloseCode, reason: String)
    /// Drops the connection at once, with no close frame.
    func abort()
}

/// Receives what happens on a transport connection.
public protocol WebSocketTransportDelegate: AnyObject, Sendable {
    /// A complete message arrived.
    func transportDidReceive(_ message: WebSocketMessage)
    /// A pong arrived with this payload.
    func transportDidReceivePong(_ payload: [UInt8])
    /// The connection ended: the peer's close code and reason (nil code when it sent no close
    /// frame), and the error that ended it, if one did. Called once, last.
    func transportDidClose(code: WebSocketCloseCode?, reason: String, error: WebSocketError?)
}
