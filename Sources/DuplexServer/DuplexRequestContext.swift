import Hummingbird
import HummingbirdWebSocket
import NIOCore

/// The request context of every Duplex route: Hummingbird's, plus the connection's channel, so a
/// route can close a connection that will not answer a close handshake.
struct DuplexRequestContext: RequestContext, WebSocketRequestContext {
    var coreContext: CoreRequestContextStorage
    let webSocket: WebSocketHandlerReference<DuplexRequestContext>
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.webSocket = .init()
        self.channel = source.channel
    }
}
