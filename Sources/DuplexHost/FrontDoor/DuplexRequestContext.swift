package import Hummingbird
package import NIOCore

/// The request context of every Duplex HTTP route: Hummingbird's, plus the connection's
/// channel, so a route can close a connection that will not answer a close handshake.
package struct DuplexRequestContext: RequestContext {
    package var coreContext: CoreRequestContextStorage
    package let channel: any Channel

    package init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
        self.channel = source.channel
    }
}
