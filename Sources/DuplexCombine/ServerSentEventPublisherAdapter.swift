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
/// let sse = ServerSentEventPublisherAdapter(url: "http://127.0.0.1:8080/events")
/// sse.events.sink { event in print(event.data) }.store(in: &cancellables)
/// sse.stateEvents.sink { state in print(state) }.store(in: &cancellables)
/// sse.connect().sink(receiveCompletion: { print($0) }, receiveValue: {}).store(in: &cancellables)
/// ```
public typealias ServerSentEventPublisherAdapter = PublisherAdapter<ServerSentEventManager>

extension PublisherAdapter where Connection == ServerSentEventManager {
    /// The manager underneath.
    public var manager: ServerSentEventManager { connection }

    /// Wraps an existing manager.
    public convenience init(manager: ServerSentEventManager) {
        self.init(connection: manager)
    }

    /// Creates a manager for `url`.
    public convenience init(url: URL, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(connection: ServerSentEventManager(url: url, retryPolicy: retryPolicy, configuration: configuration))
    }

    /// Creates a manager for a URL string; a malformed one fails `connect()`.
    public convenience init(url: String, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(connection: ServerSentEventManager(url: url, retryPolicy: retryPolicy, configuration: configuration))
    }

    /// Creates a manager for `request`.
    public convenience init(request: SSERequest, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(connection: ServerSentEventManager(request: request, retryPolicy: retryPolicy, configuration: configuration))
    }

    /// Every event from subscription on.
    public var events: AnyPublisher<ServerSentEvent, Never> { incoming }
}
