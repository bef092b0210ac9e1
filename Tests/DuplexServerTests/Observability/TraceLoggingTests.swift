import DuplexTesting
import Foundation
import InMemoryTracing
import Logging
import NIOCore
import Tracing
import Testing

@testable import DuplexServer

/// A client's W3C `traceparent` in the log lines of its connection.
@Suite("trace context: the connection's log lines and spans")
struct TraceLoggingTests {
    static let traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
    static let spanID = "00f067aa0ba902b7"
    static let traceparent = "traceparent: 00-\(traceID)-\(spanID)-01"

    @Test("a WebSocket upgrade with traceparent: opened, close frame and closed are logged with its trace id and span id; a malformed one is ignored")
    func webSocket() async throws {
        try await withTimeout {
            let (logger, lines) = WatchedLogger.make(level: .debug)
            try await withDuplexServer(logger: logger) { server in
                try await TestWebSocket.with(port: server.port, path: "/echo", extraHeaders: [Self.traceparent]) { echo in
                    try await echo.sendClose(code: 1000)
                    _ = try await echo.receiveClose()
                }
                let opened = try await lines.first(within: .seconds(10)) { $0.message == "WebSocket opened" }
                #expect(opened.metadata == ["route": "echo", "trace_id": Self.traceID, "parent_span_id": Self.spanID])
                let close = try await lines.first(within: .seconds(10)) { $0.message == "close frame sent" }
                #expect(close.metadata["trace_id"] == Self.traceID && close.metadata["code"] == "1000")
                let closed = try await lines.first(within: .seconds(10)) { $0.message == "WebSocket closed" }
                #expect(closed.metadata["trace_id"] == Self.traceID)

                try await TestWebSocket.with(port: server.port, path: "/echo", extraHeaders: ["traceparent: 00-not-a-trace-01"]) { echo in
                    try await echo.sendText("x")
                    _ = try await echo.receiveText()
                }
                let untraced = try await lines.first(within: .seconds(10)) { $0.message == "WebSocket opened" }
                #expect(untraced.metadata == ["route": "echo"])
            }
        }
    }

    @Test("an SSE request with traceparent: the stream's log lines carry it")
    func eventStream() async throws {
        try await withTimeout {
            let (logger, lines) = WatchedLogger.make(level: .debug)
            try await withDuplexServer(logger: logger) { server in
                try await TestHTTPResponse.get(
                    port: server.port, "/events?interval=10", headers: [("traceparent", "00-\(Self.traceID)-\(Self.spanID)-01")]
                ) { stream in
                    _ = try await stream.nextEvent()
                }
                let opened = try await lines.first(within: .seconds(10)) { $0.message == "event stream opened" }
                #expect(opened.metadata == ["route": "events", "trace_id": Self.traceID, "parent_span_id": Self.spanID])
                let ended = try await lines.first(within: .seconds(10)) { $0.message == "event stream ended" }
                #expect(ended.metadata["trace_id"] == Self.traceID)
            }
        }
    }

    @Test(
        "with a tracer: each WebSocket and SSE stream reports a span, a child of the request's context, with its route and close codes; each plain HTTP request one with its route and status"
    )
    func spans() async throws {
        try await withTimeout {
            let tracer = InMemoryTracer()
            var configuration = DuplexServerConfiguration()
            configuration.tracer = tracer
            let (logger, lines) = WatchedLogger.make(level: .debug)
            try await withDuplexServer(configuration: configuration, logger: logger) { server in
                let parent = ["in-memory-trace-id: trace-1", "in-memory-span-id: span-1"]
                try await TestWebSocket.with(port: server.port, path: "/echo", extraHeaders: parent) { echo in
                    try await echo.sendClose(code: 4001)
                    _ = try await echo.receiveClose()
                }
                _ = try await lines.first(within: .seconds(10)) { $0.message == "WebSocket closed" }
                let echo = try #require(tracer.finishedSpans.first { $0.operationName == "echo" })
                #expect(echo.traceID == "trace-1" && echo.parentSpanID == "span-1", "a child of the client's span")
                #expect(echo.attributes["duplex.route"]?.toSpanAttribute() == "echo")
                #expect(echo.attributes["websocket.close_code.received"]?.toSpanAttribute() == 4001)
                #expect(echo.attributes["websocket.close_code.sent"]?.toSpanAttribute() == 4001)

                try await TestHTTPResponse.get(port: server.port, "/events?interval=10") { stream in
                    _ = try await stream.nextEvent()
                }
                _ = try await lines.first(within: .seconds(10)) { $0.message == "event stream ended" }
                let events = try #require(tracer.finishedSpans.first { $0.operationName == "events" })
                #expect(events.parentSpanID == nil, "no context in the request: a root span")

                // Plain HTTP requests, pipelined on one connection: the server answers them in
                // order and closes after the last, so each one's span has ended once it closes.
                let requests = [
                    "GET /health?token=secret HTTP/1.1\r\nHost: x\r\n\(parent.joined(separator: "\r\n"))\r\n\r\n",
                    "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n",
                    "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                ]
                let answers = try await withRawConnection(port: server.port) { inbound, outbound in
                    try await outbound.write(ByteBuffer(string: requests.joined()))
                    var text = ""
                    for try await chunk in inbound { text += String(buffer: chunk) }
                    return text
                }
                #expect(answers.components(separatedBy: "HTTP/1.1 ").count == 4, "\(answers)")
                let health = try #require(
                    tracer.finishedSpans.first { $0.operationName == "/health" }, "\(tracer.finishedSpans.map(\.operationName))")
                #expect(health.kind == .server)
                #expect(health.traceID == "trace-1" && health.parentSpanID == "span-1", "a child of the client's span")
                #expect(health.attributes["http.request.method"]?.toSpanAttribute() == "GET")
                #expect(health.attributes["url.path"]?.toSpanAttribute() == "/health")
                #expect(health.attributes["http.route"]?.toSpanAttribute() == "/health")
                #expect(health.attributes["http.response.status_code"]?.toSpanAttribute() == 200)
                #expect(health.attributes["url.query"] == nil, "the query can carry a token: not recorded")
                // NotFound: the name of a path no route matches, as Hummingbird gives it.
                let missing = try #require(
                    tracer.finishedSpans.first { $0.operationName == "NotFound" }, "\(tracer.finishedSpans.map(\.operationName))")
                #expect(missing.attributes["http.response.status_code"]?.toSpanAttribute() == 404)
                #expect(tracer.finishedSpans.contains { $0.operationName == "/metrics" })
                #expect(!tracer.finishedSpans.contains { $0.operationName == "/events" }, "an SSE stream has its own span, not two")
                #expect(tracer.activeSpans.isEmpty, "every span ended")
            }
        }
    }
}
