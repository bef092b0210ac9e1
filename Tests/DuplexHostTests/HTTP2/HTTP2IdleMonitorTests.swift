import NIOCore
import NIOEmbedded
import NIOHTTP2
import Testing

@testable import DuplexHost

/// The HTTP/2 connection's stream count, idle and first-stream timeouts and GOAWAY, on an
/// embedded channel whose streams are embedded channels too.
@Suite("HTTP2IdleMonitor: timeouts and GOAWAY")
struct HTTP2IdleMonitorTests {
    struct Connection {
        let loop = EmbeddedEventLoop()
        let monitor: HTTP2IdleMonitor
        let channel: EmbeddedChannel

        init(idle: TimeAmount = .seconds(60), firstStream: TimeAmount = .seconds(10)) throws {
            monitor = HTTP2IdleMonitor(idleTimeout: idle, firstStreamTimeout: firstStream, metrics: ServerMetrics().http2)
            channel = EmbeddedChannel(handler: monitor, loop: loop)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        }

        /// A stream the client opens: an open channel on the same loop.
        func openStream(_ id: Int) throws -> EmbeddedChannel {
            let stream = EmbeddedChannel(loop: loop)
            try stream.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            monitor.opened(stream, id: HTTP2StreamID(id))
            return stream
        }

        /// The GOAWAY frames written, as their last stream ids.
        func goAways() throws -> [HTTP2StreamID] {
            var ids: [HTTP2StreamID] = []
            while let frame = try channel.readOutbound(as: HTTP2Frame.self) {
                if case .goAway(let last, let code, _) = frame.payload, code == .noError { ids.append(last) }
            }
            return ids
        }
    }

    @Test("a connection that opens no stream is sent GOAWAY and closed at the first-stream timeout, not before")
    func firstStreamTimeout() throws {
        let connection = try Connection()
        connection.loop.advanceTime(by: .seconds(9))
        #expect(connection.channel.isActive)
        connection.loop.advanceTime(by: .seconds(1))
        #expect(try connection.goAways() == [HTTP2StreamID(0)])
        #expect(!connection.channel.isActive)
    }

    @Test("an open stream keeps the connection however long; once the last closes, the idle timeout runs, then GOAWAY names the last stream")
    func idleAfterStreams() throws {
        let connection = try Connection(idle: .seconds(60))
        let first = try connection.openStream(1)
        let second = try connection.openStream(3)
        connection.loop.advanceTime(by: .seconds(600))
        #expect(connection.channel.isActive, "streams open: never idle")
        try first.close().wait()
        try second.close().wait()
        connection.loop.advanceTime(by: .seconds(59))
        #expect(connection.channel.isActive)
        connection.loop.advanceTime(by: .seconds(1))
        #expect(try connection.goAways() == [HTTP2StreamID(3)])
        #expect(!connection.channel.isActive)
    }

    @Test("goAway() with a stream open: GOAWAY at once, and the connection closes when that stream ends")
    func goAwayWaitsForStreams() throws {
        let connection = try Connection()
        let stream = try connection.openStream(5)
        connection.monitor.goAway()
        connection.loop.run()
        #expect(try connection.goAways() == [HTTP2StreamID(5)])
        #expect(connection.channel.isActive, "its stream runs to its end")
        try stream.close().wait()
        connection.loop.run()
        #expect(!connection.channel.isActive)
    }

    @Test("a client that closes its side closes the connection")
    func inputClosed() throws {
        let connection = try Connection()
        connection.channel.pipeline.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        #expect(!connection.channel.isActive)
    }
}
