public import Duplex
public import DuplexSchema
public import Foundation

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

    /// Wraps an existing manager.
    public convenience init(manager: ServerSentEventManager) {
        self.init(connection: manager)
    }

    /// Creates a manager for `url`.
    public convenience init(url: URL, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(connection: ServerSentEventManager(url: url, retryPolicy: retryPolicy, configuration: configuration))
    }

    /// Creates a manager for a URL string; a malformed one fails `connect`.
    public convenience init(url: String, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(connection: ServerSentEventManager(url: url, retryPolicy: retryPolicy, configuration: configuration))
    }

    /// Creates a manager for `request`.
    public convenience init(request: SSERequest, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(connection: ServerSentEventManager(request: request, retryPolicy: retryPolicy, configuration: configuration))
    }

    /// Calls `handler` for every event from now on.
    public func onEvent(_ handler: @escaping @Sendable (ServerSentEvent) -> Void) {
        onReceive(handler)
    }
}
