public import Duplex
public import DuplexSchema
public import Foundation

/// A ``Duplex/WebSocket`` with closures instead of async/await.
///
/// ```swift
/// let ws = WebSocketCallbackAdapter(url: URL(string: "ws://127.0.0.1:8080/echo")!)
/// ws.onMessage { message in print(message.text ?? "") }
/// ws.onStateChange { state in print(state) }
/// ws.connect { result in
///     if case .success = result { ws.send(.string("hello")) { _ in } }
/// }
/// ws.disconnect { _ in }   // can connect again later
/// ws.terminate()           // for good
/// ```
///
/// Handlers run on a background task, in order per handler. Each `on…` call adds a handler;
/// all of them stop when the socket terminates.
public final class WebSocketCallbackAdapter: Sendable {
    /// The socket underneath.
    public let socket: WebSocket

    /// Wraps an existing socket.
    public init(socket: WebSocket) {
        self.socket = socket
    }

    /// Creates a socket for `url`.
    public convenience init(url: URL, configuration: WebSocketConfiguration = .init()) {
        self.init(socket: WebSocket(url: url, configuration: configuration))
    }

    /// Creates a socket for `request`.
    public convenience init(request: WebSocketRequest, configuration: WebSocketConfiguration = .init()) {
        self.init(socket: WebSocket(request: request, configuration: configuration))
    }

    /// Calls `handler` for every message from now on.
    public func onMessage(_ handler: @escaping @Sendable (WebSocketMessage) -> Void) {
        consume(socket.messages, handler)
    }

    /// Calls `handler` with the current state, then every change.
    public func onStateChange(_ handler: @escaping @Sendable (WebSocketState) -> Void) {
        consume(socket.stateEvents, handler)
    }

    /// Calls `handler` for every event from now on.
    public func onEvent(_ handler: @escaping @Sendable (WebSocketEvent) -> Void) {
        consume(socket.events, handler)
    }

    /// Connects, then calls `completion`.
    public func connect(_ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        let socket = self.socket
        Task { completion(await Result(catching: { try await socket.connect() })) }
    }

    /// Sends, then calls `completion`.
    public func send(_ message: WebSocketMessage, _ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        let socket = self.socket
        Task { completion(await Result(catching: { try await socket.send(message) })) }
    }

    /// Disconnects (the socket can connect again), then calls `completion`.
    public func disconnect(
        code: WebSocketCloseCode = .normalClosure,
        reason: String = "",
        _ completion: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) {
        let socket = self.socket
        Task {
            await socket.disconnect(code: code, reason: reason)
            completion(.success(()))
        }
    }

    /// Terminates the socket: every handler stops.
    public func terminate() {
        let socket = self.socket
        Task { await socket.terminate() }
    }

    private func consume<Element: Sendable>(_ stream: AsyncStream<Element>, _ handler: @escaping @Sendable (Element) -> Void) {
        Task {
            for await element in stream { handler(element) }
        }
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
