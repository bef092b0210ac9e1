#if canImport(Combine)
public import Combine
#else
public import OpenCombine
#endif
public import Duplex
public import DuplexSchema
public import Foundation

/// A ``Duplex/ServerSentEventManager`` as Combine publishers (OpenCombine on Linux).
///
/// ```swift
/// let sse = ServerSentEventPublisherAdapter(url: URL(string: "http://127.0.0.1:8080/events")!)
/// sse.events.sink { event in print(event.data) }.store(in: &cancellables)
/// sse.stateEvents.sink { state in print(state) }.store(in: &cancellables)
/// sse.connect().sink(receiveCompletion: { print($0) }, receiveValue: {}).store(in: &cancellables)
/// ```
public final class ServerSentEventPublisherAdapter: Sendable {
    /// The manager underneath.
    public let manager: ServerSentEventManager

    /// Wraps an existing manager.
    public init(manager: ServerSentEventManager) {
        self.manager = manager
    }

    /// Creates a manager for `url`.
    public convenience init(url: URL, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(manager: ServerSentEventManager(url: url, retryPolicy: retryPolicy, configuration: configuration))
    }

    /// Every event from subscription on.
    public var events: AnyPublisher<ServerSentEvent, Never> {
        let manager = self.manager
        return AsyncStreamPublisher { manager.events }.eraseToAnyPublisher()
    }

    /// The current state, then every change.
    public var stateEvents: AnyPublisher<SSEState, Never> {
        let manager = self.manager
        return AsyncStreamPublisher { manager.stateEvents }.eraseToAnyPublisher()
    }

    /// Connects when subscribed to; emits once and finishes, or fails with the error.
    public func connect() -> AnyPublisher<Void, any Error> {
        let manager = self.manager
        return operationPublisher { try await manager.connect() }
    }

    /// Disconnects when subscribed to.
    public func disconnect() -> AnyPublisher<Void, any Error> {
        let manager = self.manager
        return operationPublisher { await manager.disconnect() }
    }

    /// Terminates the manager: every publisher finishes.
    public func terminate() {
        let manager = self.manager
        Task { await manager.terminate() }
    }
}
