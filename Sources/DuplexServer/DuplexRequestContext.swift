import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// The request context of every Duplex route: Hummingbird's, plus the connection's channel, so a
/// route can close a connection that will not answer a close handshake, and the slot in which a
/// WebSocket route leaves the service that takes the upgraded connection.
struct DuplexRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel
    /// Set by a WebSocket route that accepts the upgrade: the response headers and the service.
    let webSocketService: NIOLockedValueBox<(HTTPFields, WebSocketService)?>

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.channel = source.channel
        self.webSocketService = NIOLockedValueBox(nil)
    }

    /// Accepts the WebSocket upgrade: `service` takes the connection, `headers` go in the 101.
    func upgrade(_ headers: HTTPFields, to service: WebSocketService) -> Response {
        webSocketService.withLockedValue { $0 = (headers, service) }
        return Response(status: .ok)
    }
}
