import NIOCore
import NIOEmbedded
import Testing

@testable import DuplexHost

/// An HTTP/2 connection error closes the connection: swift-nio-http2 sends GOAWAY and leaves
/// the close to the application.
@Suite("HTTP2IdleMonitor: errors")
struct HTTP2IdleMonitorErrorTests {
    struct ConnectionError: Error {}

    @Test("an error swift-nio-http2 reports closes the connection once what was written is flushed, instead of leaving it to a timeout")
    func errorCloses() throws {
        let loop = EmbeddedEventLoop()
        let monitor = HTTP2IdleMonitor(idleTimeout: .seconds(300), firstStreamTimeout: .seconds(10), metrics: ServerMetrics().http2)
        let channel = EmbeddedChannel(handler: monitor, loop: loop)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        #expect(channel.isActive)
        channel.pipeline.fireErrorCaught(ConnectionError())
        loop.run()
        #expect(!channel.isActive, "closed at once, not after the 300 s idle timeout")
        #expect(throws: ConnectionError.self) { try channel.throwIfErrorCaught() }
    }
}
