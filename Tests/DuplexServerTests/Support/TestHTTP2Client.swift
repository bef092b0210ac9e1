import HTTPTypes
import NIOCore
import NIOHTTP2
import NIOHTTPTypes
import NIOHTTPTypesHTTP2
import NIOPosix
import NIOSSL
import NIOTLS

/// A minimal HTTP/2 client for tests: one TLS connection that negotiated `h2` by ALPN, on
/// which each call opens a stream, and which records the server's SETTINGS and GOAWAY.
final class TestHTTP2Client: Sendable {
    /// One stream: its response head, then its body parts as they come.
    typealias Stream = NIOAsyncChannel<HTTPResponsePart, HTTPRequestPart>
    /// A stream's response parts.
    typealias Responses = NIOAsyncChannelInboundStream<HTTPResponsePart>.AsyncIterator

    let channel: any Channel
    private let multiplexer: NIOHTTP2Handler.AsyncStreamMultiplexer<Void>
    private let frames: ConnectionFrames

    struct NotHTTP2: Error { var negotiated: String? }

    private init(channel: any Channel, multiplexer: NIOHTTP2Handler.AsyncStreamMultiplexer<Void>, frames: ConnectionFrames) {
        self.channel = channel
        self.multiplexer = multiplexer
        self.frames = frames
    }

    /// Connects to `127.0.0.1:port` over TLS trusting `caPEM`, offering only `h2`, and waits
    /// for the server's SETTINGS.
    static func connect(port: Int, caPEM: String) async throws -> TestHTTP2Client {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(caPEM.utf8)))
        tls.applicationProtocols = ["h2"]
        let context = try NIOSSLContext(configuration: tls)
        let frames = ConnectionFrames()
        let (channel, multiplexer) = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let operations = channel.pipeline.syncOperations
                    try operations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: nil))
                    let multiplexer = try operations.configureAsyncHTTP2Pipeline(
                        mode: .client, streamInitializer: { $0.eventLoop.makeSucceededVoidFuture() })
                    try operations.addHandler(frames)
                    return (channel, multiplexer)
                }
            }
        let negotiated = try await frames.negotiated.futureResult.get()
        guard negotiated == "h2" else {
            try? await channel.close()
            throw NotHTTP2(negotiated: negotiated)
        }
        // swift-nio-http2 sends `:protocol` only once the server's SETTINGS allowed it.
        _ = try await frames.settings.futureResult.get()
        return TestHTTP2Client(channel: channel, multiplexer: multiplexer, frames: frames)
    }

    /// Opens a stream, sends `request` (with `end` after its head unless `keepOpen`), and runs
    /// `body` with the stream's response parts and its writer.
    func stream<T: Sendable>(
        _ request: HTTPRequest,
        keepOpen: Bool = false,
        _ body: (inout Responses, NIOAsyncChannelOutboundWriter<HTTPRequestPart>) async throws -> T
    ) async throws -> T {
        let stream = try await multiplexer.openStream { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTPClientCodec())
                return try Stream(wrappingChannelSynchronously: channel)
            }
        }
        return try await stream.executeThenClose { inbound, outbound in
            try await outbound.write(.head(request))
            if !keepOpen { try await outbound.write(.end(nil)) }
            var responses = inbound.makeAsyncIterator()
            return try await body(&responses, outbound)
        }
    }

    /// The server's SETTINGS, once they came.
    func settings() async throws -> HTTP2Settings {
        try await frames.settings.futureResult.get()
    }

    /// The server's GOAWAY: its last stream and error code.
    func goAway() async throws -> (lastStream: HTTP2StreamID, code: NIOHTTP2.HTTP2ErrorCode) {
        try await frames.goAway.futureResult.get()
    }

    func close() async {
        try? await channel.close()
    }

    /// A request to `path` on this connection's origin.
    static func get(_ path: String) -> HTTPRequest {
        HTTPRequest(method: .get, scheme: "https", authority: "127.0.0.1", path: path)
    }

    /// An extended CONNECT for a WebSocket at `path` (RFC 8441).
    static func webSocket(_ path: String, version: String = "13", headers: HTTPFields = [:]) -> HTTPRequest {
        var request = HTTPRequest(method: .connect, scheme: "https", authority: "127.0.0.1", path: path)
        request.extendedConnectProtocol = "websocket"
        request.headerFields[.secWebSocketVersion] = version
        request.headerFields.append(contentsOf: headers)
        return request
    }
}

/// The connection-level frames a test looks at: the server's first SETTINGS and its GOAWAY.
private final class ConnectionFrames: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTP2Frame

    let negotiated: EventLoopPromise<String?>
    let settings: EventLoopPromise<HTTP2Settings>
    let goAway: EventLoopPromise<(lastStream: HTTP2StreamID, code: NIOHTTP2.HTTP2ErrorCode)>

    init() {
        let loop = MultiThreadedEventLoopGroup.singleton.any()
        negotiated = loop.makePromise()
        settings = loop.makePromise()
        goAway = loop.makePromise()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted(let negotiated)? = event as? TLSUserEvent { self.negotiated.succeed(negotiated) }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data).payload {
        case .settings(.settings(let values)): settings.succeed(values)
        case .goAway(let last, let code, _): goAway.succeed((lastStream: last, code: code))
        default: break
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        struct Closed: Error {}
        negotiated.fail(Closed())
        settings.fail(Closed())
        goAway.fail(Closed())
        context.fireChannelInactive()
    }
}

/// The stream ended before its response head.
struct NoResponseHead: Error {}

extension NIOAsyncChannelInboundStream<HTTPResponsePart>.AsyncIterator {
    /// Reads the response head.
    mutating func head() async throws -> HTTPResponse {
        while let part = try await next() {
            if case .head(let head) = part, head.status.kind != .informational { return head }
        }
        throw NoResponseHead()
    }
}
