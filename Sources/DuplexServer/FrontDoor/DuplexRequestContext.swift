import Hummingbird
import NIOCore

/// The request context of every Duplex HTTP route: Hummingbird's, plus the connection's
/// channel, so a route can close a connection that will not answer a close handshake.
struct DuplexRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.channel = source.channel
    }
}
