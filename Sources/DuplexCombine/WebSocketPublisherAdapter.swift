#if canImport(Combine)
public import Combine
#else
public import OpenCombine
#endif
public import Duplex
public import DuplexSchema

/// A ``Duplex/WebSocket`` as Combine publishers (OpenCombine on Linux).
///
/// ```swift
/// var cancellables = Set<AnyCancellable>()
/// let ws = WebSocketPublisherAdapter(url: "ws://127.0.0.1:8080/echo")
/// ws.messages.sink { message in print(message) }.store(in: &cancellables)
/// ws.stateEvents.sink { state in print(state) }.store(in: &cancellables)
/// ws.connect()
///     .flatMap { ws.send(.string("hello")) }
///     .sink(receiveCompletion: { print($0) }, receiveValue: {})
///     .store(in: &cancellables)
/// ```
public typealias WebSocketPublisherAdapter = PublisherAdapter<WebSocket>

extension PublisherAdapter where Connection == WebSocket {
    /// The socket underneath.
    public var socket: WebSocket { connection }

    /// Every message from subscription on.
    public var messages: AnyPublisher<WebSocketMessage, Never> { incoming }

    /// Every event from subscription on.
    public var events: AnyPublisher<WebSocketEvent, Never> {
        let socket = connection
        return AsyncStreamPublisher { socket.events }.eraseToAnyPublisher()
    }

    /// Sends when subscribed to; emits once and finishes, or fails with the error.
    public func send(_ message: WebSocketMessage) -> AnyPublisher<Void, any Error> {
        let socket = connection
        return Self.operation { try await socket.send(message) }
    }

    /// Disconnects with a close code and reason when subscribed to (the socket can connect
    /// again).
    public func disconnect(code: WebSocketCloseCode, reason: String = "") -> AnyPublisher<Void, any Error> {
        let socket = connection
        return Self.operation { await socket.disconnect(code: code, reason: reason) }
    }
}
