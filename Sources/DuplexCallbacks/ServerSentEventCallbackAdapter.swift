public import Duplex
public import DuplexSchema

/// A ``Duplex/ServerSentEventManager`` with closures instead of async/await.
///
/// ```swift
/// let sse = ServerSentEventCallbackAdapter(url: "http://127.0.0.1:8080/events")
/// sse.onEvent { event in print(event.data) }
/// sse.onStateChange { state in print(state) }
/// sse.connect { result in print(result) }
/// sse.disconnect { _ in }   // can connect again, resuming with Last-Event-ID
/// sse.terminate()           // for good
/// ```
public typealias ServerSentEventCallbackAdapter = CallbackAdapter<ServerSentEventManager>

extension CallbackAdapter where Connection == ServerSentEventManager {
    /// The manager underneath.
    public var manager: ServerSentEventManager { connection }

    /// Calls `handler` for every event from now on.
    public func onEvent(_ handler: @escaping @Sendable (ServerSentEvent) -> Void) {
        onReceive(handler)
    }
}
