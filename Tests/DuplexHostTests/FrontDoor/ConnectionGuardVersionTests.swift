import NIOCore
import NIOEmbedded
import Testing

@testable import DuplexHost

/// The front door's answers to other HTTP versions, on an embedded channel.
@Suite("ConnectionGuard: HTTP versions")
struct ConnectionGuardVersionTests {
    static func channel() throws -> EmbeddedChannel {
        let limits = ConnectionGuard.Limits(
            requestHeadTimeout: .seconds(10), maxRequestLineBytes: 8192, maxRequestHeadBytes: 16384, maxHeaderFields: 100)
        let channel = EmbeddedChannel(handler: ConnectionGuard(limits: limits, refusal: RefusalGate(), metrics: ServerMetrics(), admitted: true))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    /// What the guard wrote back, as text.
    static func written(_ channel: EmbeddedChannel) throws -> String {
        var text = ""
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { text += String(buffer: buffer) }
        return text
    }

    /// What the guard passed on to the HTTP decoder, as text.
    static func forwarded(_ channel: EmbeddedChannel) throws -> String {
        var text = ""
        while let buffer = try channel.readInbound(as: ByteBuffer.self) { text += String(buffer: buffer) }
        return text
    }

    @Test(
        "the HTTP/2 preface, HTTP/3.0 and a version that is not one get 505 at once, naming the version only when it looks like one; nothing is passed on",
        arguments: [
            ("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "HTTP/2.0 is not spoken here"),
            ("GET / HTTP/3.0\r\nHost: x\r\n\r\n", "HTTP/3.0 is not spoken here"),
            ("GET / HTTP/1.1\"}<script>\r\nHost: x\r\n\r\n", "this HTTP version is not spoken here"),
        ])
    func answered(_ request: String, _ said: String) throws {
        let channel = try Self.channel()
        try channel.writeInbound(ByteBuffer(string: request))
        let answer = try Self.written(channel)
        #expect(answer.hasPrefix("HTTP/1.1 505 HTTP Version Not Supported\r\n"), "\(answer)")
        #expect(answer.contains(said), "\(answer)")
        #expect(try Self.forwarded(channel).isEmpty, "the HTTP decoder never sees it")
        _ = try? channel.finish()
    }

    @Test("HTTP/1.0 and HTTP/1.1 pass as they came; a request to upgrade to h2c passes without its Upgrade and HTTP2-Settings fields")
    func passed() throws {
        for request in ["GET /health HTTP/1.0\r\nHost: x\r\n\r\n", "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"] {
            let channel = try Self.channel()
            try channel.writeInbound(ByteBuffer(string: request))
            #expect(try Self.forwarded(channel) == request)
            #expect(try Self.written(channel).isEmpty)
            _ = try? channel.finish()
        }
        let channel = try Self.channel()
        try channel.writeInbound(
            ByteBuffer(
                string:
                    "GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"
            ))
        #expect(try Self.forwarded(channel) == "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        let closing = try Self.channel()
        try closing.writeInbound(
            ByteBuffer(string: "GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings, close\r\nUpgrade: h2c\r\n\r\n"))
        #expect(try Self.forwarded(closing) == "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "the other tokens stay")
        _ = try? closing.finish()
        #expect(try Self.written(channel).isEmpty)
        _ = try? channel.finish()
    }
}
