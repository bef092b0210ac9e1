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
    /// The extensions the server enabled (its `Sec-WebSocket-Extensions`), if any.
    var negotiatedExtensions: String? { get }
    /// Accepts a message into the connection's outbound buffer and returns at once. Messages are
    /// written in the order they are accepted, coalesced where the transport can.
    /// - Returns: true when the outbound buffer is now above its high watermark: the socket then
    ///   holds its sender until ``WebSocketTransportDelegate/transportDidDrain()``.
    func write(_ message: WebSocketMessage) -> Bool
    /// Calls `completion` once every message accepted so far is written to the network, or with
    /// the error that stopped them.
    func flush(_ completion: @escaping @Sendable (Result<Void, any Error>) -> Void)
    /// Sends a ping with this payload (at most 125 bytes).
    func ping(_ payload: [UInt8])
    /// Starts the close handshake, after the messages already accepted; the connection ends when
    /// the peer answers or the close timeout passes.
    func close(code: WebSocketCloseCode, reason: String)
    /// Drops the connection at once, with no close frame.
    func abort()
    /// The consumers caught up: read again if reading was held back (see
    /// ``WebSocketTransportDelegate/transportShouldRead()``).
    func resumeReading()
}

extension WebSocketTransportConnection {
    /// Completes at once: for transports that cannot tell when a write reached the network.
    public func flush(_ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        completion(.success(()))
    }

    /// Does nothing: for transports that cannot hold back their reads.
    public func resumeReading() {}

    /// None, unless the transport says.
    public var negotiatedExtensions: String? { nil }
}

/// Receives what happens on a transport connection.
public protocol WebSocketTransportDelegate: AnyObject, Sendable {
    /// A complete message arrived.
    func transportDidReceive(_ message: WebSocketMessage)
    /// A pong arrived with this payload.
    func transportDidReceivePong(_ payload: [UInt8])
    /// Whether the consumers want more: when false, the transport should stop reading from the
    /// network until ``WebSocketTransportConnection/resumeReading()``.
    func transportShouldRead() -> Bool
    /// The outbound buffer, once above its high watermark, has drained below its low one.
    func transportDidDrain()
    /// The peer broke the protocol: the transport reads no more, and fails the connection once
    /// `proceed` is called, which the delegate does when what it was given before has been
    /// handled (every reader came back for more; a stream never read, for 50 ms at most), so that the application's answers to those
    /// messages go out before the close frame. The transport bounds the wait with its close
    /// timeout. By default, at once.
    func transportWillFail(_ proceed: @escaping @Sendable () -> Void)
    /// The connection ended: the peer's close code and reason (nil code when it sent no close
    /// frame), the error that ended it, if one did, and how many accepted messages were not
    /// confirmed written. Called once, last.
    func transportDidClose(code: WebSocketCloseCode?, reason: String, error: WebSocketError?, unwrittenMessages: Int)
}

extension WebSocketTransportDelegate {
    /// At once.
    public func transportWillFail(_ proceed: @escaping @Sendable () -> Void) {
        proceed()
    }

    /// Reports a close with no count of unwritten messages.
    public func transportDidClose(code: WebSocketCloseCode?, reason: String, error: WebSocketError?) {
        transportDidClose(code: code, reason: reason, error: error, unwrittenMessages: 0)
    }
}
