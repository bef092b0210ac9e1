import NIOCore
import NIOEmbedded
import Testing

@testable import DuplexHost

/// The front door on an embedded channel: each limit it enforces on a request head, the
/// timeout on a silent or slow one, the refusals, and what it passes on to the HTTP decoder.
@Suite("ConnectionGuard: limits, timeouts and refusals")
struct ConnectionGuardTests {
    static let limits = ConnectionGuard.Limits(
        requestHeadTimeout: .seconds(10), maxRequestLineBytes: 100, maxRequestHeadBytes: 400, maxHeaderFields: 5)

    static func channel(admitted: Bool = true, refusal: RefusalGate = RefusalGate()) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel(handler: ConnectionGuard(limits: limits, refusal: refusal, metrics: ServerMetrics(), admitted: admitted))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        return channel
    }

    /// The status line the guard answered with; nil when it wrote nothing.
    static func status(_ channel: EmbeddedChannel) throws -> String? {
        try ConnectionGuardVersionTests.written(channel).split(separator: "\r\n").first.map(String.init)
    }

    @Test("a connection that sends nothing is closed at the request-head timeout, unanswered, not before")
    func silent() throws {
        let channel = try Self.channel()
        channel.embeddedEventLoop.advanceTime(by: .seconds(9))
        #expect(channel.isActive)
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive)
        #expect(try Self.status(channel) == nil)
    }

    @Test("a head still unfinished at the timeout (a slowloris) gets 408")
    func slowloris() throws {
        let channel = try Self.channel()
        try channel.writeInbound(ByteBuffer(string: "GET /echo HTTP/1.1\r\nHost: x\r\n"))
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(try Self.status(channel) == "HTTP/1.1 408 Request Timeout")
        #expect(try ConnectionGuardVersionTests.forwarded(channel).isEmpty, "an unfinished head is never passed on")
    }

    @Test("a head finished in time is passed on whole, and the timeout no longer applies to it")
    func inTime() throws {
        let channel = try Self.channel()
        let request = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        try channel.writeInbound(ByteBuffer(string: "GET /health HTT"))
        try channel.writeInbound(ByteBuffer(string: "P/1.1\r\nHost: x\r\n\r\n"))
        #expect(try ConnectionGuardVersionTests.forwarded(channel) == request)
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        #expect(try Self.status(channel) == nil)
    }

    @Test(
        "over a limit, the answer names it: a long request line 414, a large head or too many fields 431, a malformed line 400",
        arguments: [
            ("GET /\(String(repeating: "a", count: 120)) HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 414 URI Too Long"),
            (
                "GET / HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "b", count: 90))\r\nX-Big: \(String(repeating: "b", count: 90))\r\nX-Big: \(String(repeating: "b", count: 90))\r\nX-Big: \(String(repeating: "b", count: 90))\r\n\r\n",
                "HTTP/1.1 431 Request Header Fields Too Large"
            ),
            ("GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\nE: 5\r\nF: 6\r\n\r\n", "HTTP/1.1 431 Request Header Fields Too Large"),
            ("GARBAGE\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        ])
    func overLimits(_ request: String, _ status: String) throws {
        let channel = try Self.channel()
        try channel.writeInbound(ByteBuffer(string: request))
        #expect(try Self.status(channel) == status)
        #expect(try ConnectionGuardVersionTests.forwarded(channel).isEmpty)
    }

    @Test("a connection past the connection limit gets 503 with Retry-After at once, before it sends anything")
    func notAdmitted() throws {
        let channel = try Self.channel(admitted: false)
        let answer = try ConnectionGuardVersionTests.written(channel)
        #expect(answer.hasPrefix("HTTP/1.1 503 Service Unavailable\r\n"))
        #expect(answer.contains("Retry-After: 1\r\n"))
    }

    @Test("while the server refuses (a chaos fault), a request gets 503; the paths the table exempts pass")
    func refusing() throws {
        let refusal = RefusalGate()
        refusal.exempting { $0.hasPrefix("/_chaos/") }
        refusal.refuse(for: .seconds(60))
        let refused = try Self.channel(refusal: refusal)
        try refused.writeInbound(ByteBuffer(string: "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(try Self.status(refused) == "HTTP/1.1 503 Service Unavailable")

        let exempt = try Self.channel(refusal: refusal)
        let chaos = "POST /_chaos/drop HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        try exempt.writeInbound(ByteBuffer(string: chaos))
        #expect(try ConnectionGuardVersionTests.forwarded(exempt) == chaos)
    }

    @Test("once the server stops, a new request is closed unanswered")
    func stopping() throws {
        let refusal = RefusalGate()
        refusal.setStopping(true)
        let channel = try Self.channel(refusal: refusal)
        try channel.writeInbound(ByteBuffer(string: "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n"))
        #expect(try Self.status(channel) == nil)
        #expect(try ConnectionGuardVersionTests.forwarded(channel).isEmpty)
        #expect(!channel.isActive)
    }

    @Test(
        "a malformed WebSocket upgrade is answered as RFC 6455 says: no key 400, another version 426 with Sec-WebSocket-Version: 13",
        arguments: [
            ("GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n", "400", nil),
            (
                "GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 12\r\n\r\n",
                "426", "Sec-WebSocket-Version: 13"
            ),
        ] as [(String, String, String?)])
    func badUpgrade(_ request: String, _ status: String, _ header: String?) throws {
        let channel = try Self.channel()
        try channel.writeInbound(ByteBuffer(string: request))
        let answer = try ConnectionGuardVersionTests.written(channel)
        #expect(answer.hasPrefix("HTTP/1.1 \(status) "), "\(answer)")
        if let header { #expect(answer.contains(header + "\r\n"), "\(answer)") }
    }

    @Test("pipelined requests with bodies pass on in order; a bad head after them is answered through the HTTP server, after their responses")
    func pipelined() throws {
        let channel = try Self.channel()
        let first = "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
        let second = "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nGET"
        try channel.writeInbound(ByteBuffer(string: first + second + "GET /\(String(repeating: "a", count: 120)) HTTP/1.1\r\n\r\n"))
        let forwarded = try ConnectionGuardVersionTests.forwarded(channel)
        #expect(forwarded.hasPrefix(first + second), "the bodies are skipped, not read as heads: \(forwarded)")
        #expect(forwarded.hasSuffix("GET \(RouteTable.Route.refusedPath)/414 HTTP/1.1\r\nHost: duplex-server\r\nConnection: close\r\n\r\n"))
        #expect(try Self.status(channel) == nil, "not written ahead of the responses still owed")
    }
}
