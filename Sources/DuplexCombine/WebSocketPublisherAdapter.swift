#if canImport(Combine)
public import Combine
#else
public import OpenCombine
#endif
public import Duplex
public import DuplexSchema
public import Foundation

/// A ``Duplex/WebSocket`` as Combine publishers (OpenCombine on Linux).
///
/// ```swift
/// var cancellables = Set<AnyCancellable>()
/// let ws = WebSocketPublisherAdapter(url: URL(string: "ws://127.0.0.1:8080/echo")!)
/// ws.messages.sink { message in print(message) }.store(in: &cancellables)
/// ws.stateEvents.sink { state in print(state) }.store(in: &cancellables)
/// ws.connect()
///     .flatMap { ws.send(.string("hello")) }
///     .sink(receiveCompletion: { print($0) }, receiveValue: {})
///     .store(in: &cancellables)
/// ```
///
/// Each subscription gets its own stream from the socket. `connect()`, `send(_:)` and
/// `disconnect()` do their work when subscribed to, once per subscription.
public final class WebSocketPublisherAdapter: Sendable {
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

    /// Every message from subscription on.
    public var messages: AnyPublisher<WebSocketMessage, Never> {
        let socket = self.socket
        return AsyncStreamPublisher { socket.messages }.eraseToAnyPublisher()
    }

    /// The current state, then every change.
    public var stateEvents: AnyPublisher<WebSocketState, Never> {
        let socket = self.socket
        return AsyncStreamPublisher { socket.stateEvents }.eraseToAnyPublisher()
    }

    /// Every event from subscription on.
    public var events: AnyPublisher<WebSocketEvent, Never> {
        let socket = self.socket
        return AsyncStreamPublisher { socket.events }.eraseToAnyPublisher()
    }

    /// Connects when subscribed to; emits once and finishes, or fails with the error.
    public func connect() -> AnyPublisher<Void, any Error> {
        let socket = self.socket
        return operationPublisher { try await socket.connect() }
    }

    /// Sends when subscribed to; emits once and finishes, or fails with the error.
    public func send(_ message: WebSocketMessage) -> AnyPublisher<Void, any Error> {
        let socket = self.socket
        return operationPublisher { try await socket.send(message) }
    }

    /// Disconnects when subscribed to (the socket can connect again).
    public func disconnect(code: WebSocketCloseCode = .normalClosure, reason: String = "") -> AnyPublisher<Void, any Error> {
        let socket = self.socket
        return operationPublisher { await socket.disconnect(code: code, reason: reason) }
    }

    /// Terminates the socket: every publisher finishes.
    public func terminate() {
        let socket = self.socket
        Task { await socket.terminate() }
    }
}

/// A publisher that runs `body` when subscribed to, then emits once and finishes, or fails with
/// its error.
func operationPublisher(_ body: @escaping @Sendable () async throws -> Void) -> AnyPublisher<Void, any Error> {
    AsyncStreamPublisher<Result<Void, WebSocketOperationFailure>> {
        AsyncStream { continuation in
            let task = Task {
                do {
                    try await body()
                    continuation.yield(.success(()))
                } catch {
                    continuation.yield(.failure(WebSocketOperationFailure(error: error)))
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
    .setFailureType(to: (any Error).self)
    .flatMap { result in result.publisher.mapError { $0.error } }
    .eraseToAnyPublisher()
}

/// Carries an operation's error through a never-failing stream.
struct WebSocketOperationFailure: Error {
    var error: any Error
}
