public import DuplexSchema

/// What ``WebSocket`` and ``ServerSentEventManager`` have in common: a connection that is
/// opened, receives a stream of elements, changes state, and is closed or ended for good.
///
/// The callback adapters (`DuplexCallbacks`) and Combine adapters (`DuplexCombine`) are each
/// written once, over this protocol; a client of your own that conforms gets them too.
public protocol LiveConnection: AnyObject, Sendable {
    /// What the connection receives: ``WebSocketMessage`` or ``ServerSentEvent``.
    associatedtype Incoming: Sendable
    /// Its state: ``WebSocketState`` or ``SSEState``.
    associatedtype State: Sendable

    /// A new stream of everything received from now on; each caller gets its own.
    var incoming: AsyncStream<Incoming> { get }
    /// A new stream of the current state, then every change; each caller gets its own.
    var stateEvents: AsyncStream<State> { get }
    /// Opens the connection; returns once it is open, at once when it already is.
    func connect() async throws
    /// Closes the connection; the streams stay open and ``connect()`` works again.
    func disconnect() async
    /// Closes the connection, finishes every stream, and prevents any reconnection.
    func terminate() async
}

extension WebSocket: LiveConnection {
    /// The same as ``messages``.
    public var incoming: AsyncStream<WebSocketMessage> { messages }
}

extension ServerSentEventManager: LiveConnection {
    /// The same as ``events``.
    public var incoming: AsyncStream<ServerSentEvent> { events }
}
