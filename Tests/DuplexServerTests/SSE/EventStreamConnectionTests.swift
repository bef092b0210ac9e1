import DuplexTesting
import Foundation
import NIOCore
import Testing

@testable import DuplexHost
@testable import DuplexServer

/// SSE streams served on the connection's event loop (``EventStreamHandler``), as a raw
/// HTTP/1.1 client sees them: on a connection of its own, after plain requests on the same
/// connection (keep-alive), and refused.
@Suite("SSE streams on the event loop")
struct EventStreamConnectionTests {
    /// Reads from `inbound` into `text` until `done` says it has enough; false when the
    /// connection closed first.
    static func read(
        _ inbound: inout NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator,
        into text: inout String,
        until done: (String) -> Bool
    ) async throws -> Bool {
        while !done(text) {
            guard let chunk = try await inbound.next() else { return false }
            text += String(buffer: chunk)
        }
        return true
    }

    static let feed = ScriptedRoute.sse(
        "/feed",
        script: SSEScript(events: [.init(id: "1", data: "one"), .init(id: "2", data: "two")], every: .milliseconds(10))
    )

    @Test("after plain requests on one connection, a stream; once it ends, the connection takes more requests")
    func streamAfterPlainRequests() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: [Self.feed]) { server in
                try await withRawConnection(port: server.port) { inbound, outbound in
                    var reader = inbound.makeAsyncIterator()
                    var text = ""
                    try await outbound.write(ByteBuffer(string: "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
                    #expect(try await Self.read(&reader, into: &text) { $0.contains(#""status":"ok""#) })
                    // A refused stream request is answered, and the connection goes on.
                    text = ""
                    try await outbound.write(ByteBuffer(string: "GET /events?interval=nope HTTP/1.1\r\nHost: x\r\n\r\n"))
                    #expect(try await Self.read(&reader, into: &text) { $0.contains("invalid_interval") })
                    #expect(text.hasPrefix("HTTP/1.1 400 "))
                    #expect(!text.lowercased().contains("connection: close"), "\(text)")
                    // A stream, whose script ends it: the response ends with the last chunk.
                    text = ""
                    try await outbound.write(ByteBuffer(string: "GET /feed HTTP/1.1\r\nHost: x\r\n\r\n"))
                    #expect(try await Self.read(&reader, into: &text) { $0.contains("\r\n0\r\n\r\n") }, "\(text)")
                    #expect(text.hasPrefix("HTTP/1.1 200 "))
                    #expect(text.lowercased().contains("content-type: text/event-stream"))
                    #expect(text.contains("id: 1\ndata: one\n\n") && text.contains("id: 2\ndata: two\n\n"))
                    #expect(!text.lowercased().contains("connection: close"), "\(text)")
                    // The same connection serves the next request, and pipelined ones in order.
                    text = ""
                    try await outbound.write(
                        ByteBuffer(string: "GET /feed HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
                    // Read to the end: the server closes after the request that asked (or the
                    // test's timeout ends it), however the last response is split into reads.
                    while let buffer = try await reader.next() { text += String(buffer: buffer) }
                    let stream = try #require(text.range(of: "data: two"))
                    let health = try #require(text.range(of: #""status":"ok""#), "\(text)")
                    #expect(stream.lowerBound < health.lowerBound, "answered in order: \(text)")
                    #expect(text.hasSuffix("}"), "nothing after the last response: \(text)")
                }
            }
        }
    }

    @Test("a connection whose first request is a stream says Connection: close, and closes when the stream ends")
    func streamOnlyConnection() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: [Self.feed]) { server in
                let text = try await withRawConnection(port: server.port) { inbound, outbound in
                    try await outbound.write(ByteBuffer(string: "GET /feed HTTP/1.1\r\nHost: x\r\n\r\n"))
                    var text = ""
                    for try await chunk in inbound { text += String(buffer: chunk) }
                    return text
                }
                #expect(text.hasPrefix("HTTP/1.1 200 "))
                #expect(text.lowercased().contains("connection: close"))
                #expect(text.hasSuffix("data: two\n\n\r\n0\r\n\r\n"), "every event, then the end of the body: \(text)")
                #expect(server.server.connections.count == 0, "the stream left the registry")
            }
        }
    }

    @Test("a POST stream that expects 100-continue is asked for its body, and streams what its handler makes of it")
    func expectContinue() async throws {
        try await withTimeout(.seconds(30)) {
            let echo = ScriptedRoute.sse("/complete", method: "POST") { request in
                SSEScript(events: [.init(data: request.body ?? ""), .init(data: "[DONE]")])
            }
            try await withDuplexServer(routes: [echo]) { server in
                try await withRawConnection(port: server.port) { inbound, outbound in
                    var reader = inbound.makeAsyncIterator()
                    var text = ""
                    try await outbound.write(
                        ByteBuffer(string: "POST /complete HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"))
                    #expect(try await Self.read(&reader, into: &text) { $0.contains("\r\n\r\n") })
                    #expect(text == "HTTP/1.1 100 Continue\r\n\r\n", "asked before the body is sent: \(text)")
                    text = ""
                    try await outbound.write(ByteBuffer(string: "hello"))
                    #expect(try await Self.read(&reader, into: &text) { $0.contains("[DONE]") })
                    #expect(text.hasPrefix("HTTP/1.1 200 ") && text.contains("data: hello\n\n"), "\(text)")
                }
            }
        }
    }

    @Test("a stream request whose body passes the message limit is answered 413 and the connection closes")
    func bodyOverLimit() async throws {
        try await withTimeout(.seconds(30)) {
            let post = ScriptedRoute.sse("/complete", method: "POST", script: SSEScript(events: [.init(data: "[DONE]")]))
            try await withDuplexServer(configuration: .init(maxMessageBytes: 1_000), routes: [post]) { server in
                let text = try await withRawConnection(port: server.port) { inbound, outbound in
                    let body = String(repeating: "x", count: 2_000)
                    try await outbound.write(ByteBuffer(string: "POST /complete HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n\(body)"))
                    var text = ""
                    for try await chunk in inbound { text += String(buffer: chunk) }
                    return text
                }
                #expect(text.hasPrefix("HTTP/1.1 413 "), "\(text)")
                #expect(text.contains("over the server's message limit"))
            }
        }
    }
}
