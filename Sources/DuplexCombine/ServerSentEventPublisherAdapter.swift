#if canImport(Combine)
public import Combine
#else
public import OpenCombine
#endif
public import Duplex
public import DuplexSchema

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

    /// Every event from subscription on.
    public var events: AnyPublisher<ServerSentEvent, Never> { incoming }
}
