import DuplexSchema
import NIOCore
import NIOHTTP1
import NIOPosix

/// A minimal HTTP/1.1 client for tests: one GET, the response head, and its body as it streams,
/// de-chunked by swift-nio's HTTP decoder.
final class TestHTTPResponse {
    private(set) var status = 0
    private(set) var headers = HTTPHeaders()
    /// Every body byte read so far, as text.
    private(set) var bodyText = ""
    /// The body's bytes so far, as they came.
    private(set) var bodyBytes: [UInt8] = []
    private var parser = ServerSentEventParser()
    private var pendingEvents: [ServerSentEvent] = []
    private var inbound: NIOAsyncChannelInboundStream<HTTPClientResponsePart>.AsyncIterator
    private var ended = false

    struct UnexpectedEnd: Error {}

    private init(inbound: NIOAsyncChannelInboundStream<HTTPClientResponsePart>) {
        self.inbound = inbound.makeAsyncIterator()
    }

    /// Sends `GET path` to `127.0.0.1:port` with `headers`, reads the response head, and runs `body`.
    static func get<T>(
        host: String = "127.0.0.1",
        port: Int,
        _ path: String,
        method: HTTPMethod = .GET,
        headers: [(String, String)] = [],
        _ body: (TestHTTPResponse) async throws -> T
    ) async throws -> T {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
            head.headers.add(name: "Host", value: host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
            if method == .POST { head.headers.add(name: "Content-Length", value: "0") }
            for (name, value) in headers { head.headers.add(name: name, value: value) }
            // Head and end in one write: a server that answers the head alone (a 400) and closes
            // must not find the end still to be written (it failed with "I/O on closed channel").
            try await outbound.write(contentsOf: [.head(head), .end(nil)])
            let response = TestHTTPResponse(inbound: inbound)
            try await response.readHead()
            return try await body(response)
        }
    }

    private func readHead() async throws {
        while let part = try await inbound.next() {
            if case .head(let head) = part {
                status = Int(head.status.code)
                headers = head.headers
                return
            }
        }
        throw UnexpectedEnd()
    }

    /// Reads the next body chunk; returns false at the end of the body.
    @discardableResult
    func readChunk() async throws -> Bool {
        guard !ended else { return false }
        while let part = try await inbound.next() {
            switch part {
            case .body(let buffer):
                bodyText += String(buffer: buffer)
                bodyBytes += buffer.readableBytesView
                pendingEvents += try parser.parse(buffer.readableBytesView)
                return true
            case .end:
                ended = true
                parser.finish()
                return false
            case .head:
                continue
            }
        }
        ended = true
        return false
    }

    /// The whole remaining body, as text.
    func readBody() async throws -> String {
        while try await readChunk() {}
        return bodyText
    }

    /// The next server-sent event, or nil when the stream ends.
    func nextEvent() async throws -> ServerSentEvent? {
        while pendingEvents.isEmpty {
            guard try await readChunk() else { return nil }
        }
        return pendingEvents.removeFirst()
    }

    /// The reconnection time the stream set, if any.
    var retry: Int? { parser.reconnectionTime }
}
