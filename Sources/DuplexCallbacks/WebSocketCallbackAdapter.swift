public import Duplex
public import DuplexSchema

/// A ``Duplex/WebSocket`` with closures instead of async/await.
///
/// ```swift
/// let ws = WebSocketCallbackAdapter(url: "ws://127.0.0.1:8080/echo")
/// ws.onMessage { message in print(message.text ?? "") }
/// ws.onStateChange { state in print(state) }
/// ws.connect { result in
///     if case .success = result { ws.send(.string("hello")) { _ in } }
/// }
/// ws.disconnect { _ in }   // can connect again later
/// ws.terminate()           // for good
/// ```
public typealias WebSocketCallbackAdapter = CallbackAdapter<WebSocket>

extension CallbackAdapter where Connection == WebSocket {
    /// The socket underneath.
    public var socket: WebSocket { connection }

    /// Calls `handler` for every message from now on.
    public func onMessage(_ handler: @escaping @Sendable (WebSocketMessage) -> Void) {
        onReceive(handler)
    }

    /// Calls `handler` for every event from now on.
    public func onEvent(_ handler: @escaping @Sendable (WebSocketEvent) -> Void) {
        consume(connection.events, handler)
    }

    /// Sends, after every send called before it, then calls `completion`.
    public func send(_ message: WebSocketMessage, _ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        let socket = connection
        enqueue({ try await socket.send(message) }, completion)
    }

    /// Disconnects with a close code and reason (the socket can connect again), then calls
    /// `completion`.
    public func disconnect(
        code: WebSocketCloseCode,
        reason: String = "",
        _ completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        let socket = connection
        // Ends when the close handshake does (the close timeout bounds it).
        Task {
            await socket.disconnect(code: code, reason: reason)
            completion(.success(()))
        }
    }
}
