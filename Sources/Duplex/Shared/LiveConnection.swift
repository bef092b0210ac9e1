public import DuplexSchema
public import Foundation

/// What ``WebSocket`` and ``ServerSentEventManager`` have in common: a connection that is
/// opened, receives a stream of elements, changes state, and is closed or ended for good.
///
/// The callback adapters (`DuplexCallbacks`) and Combine adapters (`DuplexCombine`) are each
/// written once, over this protocol; a client of your own that conforms gets them too.
public protocol LiveConnection: AnyObject, Sendable {
    /// What the connection receives: ``WebSocketMessage`` or `ServerSentEvent`.
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

/// An adapter over a ``LiveConnection`` (the callback and Combine adapters): conforming gives it
/// the initialisers of both clients, written once here.
public protocol LiveConnectionAdapter {
    /// The connection it adapts.
    associatedtype Connection: LiveConnection
    /// Wraps an existing connection.
    init(connection: Connection)
}

extension LiveConnectionAdapter where Connection == WebSocket {
    /// Wraps an existing socket.
    public init(socket: WebSocket) {
        self.init(connection: socket)
    }

    /// Creates a socket for `url`.
    public init(url: URL, configuration: WebSocketConfiguration = .init()) {
        self.init(connection: WebSocket(url: url, configuration: configuration))
    }

    /// Creates a socket for a URL string; a malformed one fails `connect`.
    public init(url: String, configuration: WebSocketConfiguration = .init()) {
        self.init(connection: WebSocket(url: url, configuration: configuration))
    }

    /// Creates a socket for `request`.
    public init(request: WebSocketRequest, configuration: WebSocketConfiguration = .init()) {
        self.init(connection: WebSocket(request: request, configuration: configuration))
    }
}

extension LiveConnectionAdapter where Connection == ServerSentEventManager {
    /// Wraps an existing manager.
    public init(manager: ServerSentEventManager) {
        self.init(connection: manager)
    }

    /// Creates a manager for `url`.
    public init(url: URL, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(connection: ServerSentEventManager(url: url, retryPolicy: retryPolicy, configuration: configuration))
    }

    /// Creates a manager for a URL string; a malformed one fails `connect`.
    public init(url: String, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(connection: ServerSentEventManager(url: url, retryPolicy: retryPolicy, configuration: configuration))
    }

    /// Creates a manager for `request`.
    public init(request: SSERequest, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(connection: ServerSentEventManager(request: request, retryPolicy: retryPolicy, configuration: configuration))
    }
}
