public import Duplex
public import DuplexSchema
public import Foundation

/// A ``Duplex/ServerSentEventManager`` with closures instead of async/await.
///
/// ```swift
/// let sse = ServerSentEventCallbackAdapter(url: URL(string: "http://127.0.0.1:8080/events")!)
/// sse.onEvent { event in print(event.data) }
/// sse.onStateChange { state in print(state) }
/// sse.connect { result in print(result) }
/// sse.disconnect { _ in }   // can connect again, resuming with Last-Event-ID
/// sse.terminate()           // for good
/// ```
public final class ServerSentEventCallbackAdapter: Sendable {
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

    /// Creates a manager for `request`.
    public convenience init(request: SSERequest, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(manager: ServerSentEventManager(request: request, retryPolicy: retryPolicy, configuration: configuration))
    }

    /// Calls `handler` for every event from now on.
    public func onEvent(_ handler: @escaping @Sendable (ServerSentEvent) -> Void) {
        let events = manager.events
        Task { for await event in events { handler(event) } }
    }

    /// Calls `handler` with the current state, then every change.
    public func onStateChange(_ handler: @escaping @Sendable (SSEState) -> Void) {
        let states = manager.stateEvents
        Task { for await state in states { handler(state) } }
    }

    /// Connects, then calls `completion`.
    public func connect(_ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        let manager = self.manager
        Task { completion(await Result(catching: { try await manager.connect() })) }
    }

    /// Disconnects (the manager can connect again), then calls `completion`.
    public func disconnect(_ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        let manager = self.manager
        Task {
            await manager.disconnect()
            completion(.success(()))
        }
    }

    /// Terminates the manager: every handler stops.
    public func terminate() {
        let manager = self.manager
        Task { await manager.terminate() }
    }
}
