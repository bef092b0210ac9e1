import DuplexWire
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes

/// The first handler of each HTTP/2 stream, after swift-nio-extras' codec that turns the
/// stream's frames into HTTP parts. It reads the request head and makes the stream one of two
/// things, then steps aside:
/// - an extended CONNECT with `:protocol = websocket` (RFC 8441) becomes a WebSocket served on
///   the event loop, by the same route and service as an HTTP/1.1 upgrade
///   (``HTTP2WebSocketStream`` carries its frames in DATA frames);
/// - a request a stream route matches becomes an SSE stream served on the event loop
///   (``EventStreamHandler``);
/// - any other request goes to Hummingbird's responder, through the connection's task
///   (``HTTP2Streams``).
///
/// It answers what the front door (``ConnectionGuard``) answers over HTTP/1.1: 503 while the
/// server refuses requests (a chaos fault) or is stopping, 426 for a WebSocket version other
/// than 13, 400 for a WebSocket path no route serves or a CONNECT for another protocol.
final class HTTP2StreamRouter: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    private let connection: HTTP2Connection
    private var routed = false

    init(connection: HTTP2Connection) {
        self.connection = connection
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !routed else {
            context.fireChannelRead(data)
            return
        }
        routed = true
        guard case .head(let head) = unwrapInboundIn(data) else {
            context.close(promise: nil)
            return
        }
        let path = head.path ?? "/"
        if connection.refusal.isStopping {
            refuse(.serviceUnavailable, "the server is stopping", headers: [.retryAfter: "1"], context: context)
        } else if connection.refusal.refuses(path) {
            refuse(.serviceUnavailable, "the server is refusing new connections (chaos)", headers: [.retryAfter: "1"], context: context)
        } else if head.method == .connect {
            serveWebSocket(head, context: context)
        } else if connection.eventStreams.route(head) != nil {
            serveStream(data, context: context)
        } else {
            serveHTTP(data, context: context)
        }
    }

    /// An extended CONNECT: the WebSocket route's service, installed after a 200.
    private func serveWebSocket(_ head: HTTPRequest, context: ChannelHandlerContext) {
        guard head.extendedConnectProtocol == "websocket" else {
            refuse(.badRequest, "only the websocket protocol is served over CONNECT", context: context)
            return
        }
        guard head.headerFields[.secWebSocketVersion] == "13" else {
            refuse(.upgradeRequired, "the WebSocket version must be 13", headers: [.secWebSocketVersion: "13"], context: context)
            return
        }
        let request = Request(head: head, body: .init(buffer: .init()))
        let routed = connection.route(request)
        guard case .later = routed else {
            answer(routed, to: request, context: context)
            return
        }
        // Answered once known (a proxy route's upstream handshake): the stream waits.
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        routed.resolved(for: context.channel).whenSuccess { resolved in
            let (router, context) = bound.value
            router.answer(resolved, to: request, context: context)
        }
    }

    /// Serves or refuses the CONNECT as `answer` says.
    private func answer(_ answer: UpgradeAnswer, to request: Request, context: ChannelHandlerContext) {
        let (headers, service): (HTTPFields, WebSocketService)
        switch answer {
        case .accept(let accepted, let chosen): (headers, service) = (accepted, chosen)
        case .refuse(let refusal):
            refuse(refusal, context: context)
            return
        case .later:
            preconditionFailure("a resolved answer is not later")
        }
        var responseHeaders = headers
        let deflate = connection.compression.flatMap {
            PerMessageDeflateNegotiation.answer(offers: request.headers[values: .secWebSocketExtensions], settings: $0)
        }
        if let deflate { responseHeaders[.secWebSocketExtensions] = deflate.answer }
        do {
            let pipeline = context.pipeline.syncOperations
            try pipeline.addHandler(HTTP2WebSocketStream<HTTP2WebSocketServerParts>(), position: .after(self))
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .ok, headerFields: responseHeaders))), promise: nil)
            pipeline.removeHandler(context: context, promise: nil)
            try service.install(context.channel, deflate?.agreement)
            let metrics = connection.metrics.http2
            metrics.served(.webSocket)
            context.channel.closeFuture.whenComplete { _ in metrics.webSocketClosed() }
        } catch {
            context.close(promise: nil)
        }
    }

    /// A stream route's request: served on the event loop by an ``EventStreamHandler``, which
    /// takes its parts from here on.
    private func serveStream(_ head: NIOAny, context: ChannelHandlerContext) {
        do {
            try context.pipeline.syncOperations.addHandler(
                EventStreamHandler(serving: connection.eventStreams, placement: .http2Stream), position: .after(self))
            connection.metrics.http2.served(.http)
            context.fireChannelRead(head)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        } catch {
            context.close(promise: nil)
        }
    }

    /// Any other request: its parts go to an async channel the connection's task serves.
    private func serveHTTP(_ head: NIOAny, context: ChannelHandlerContext) {
        do {
            let asyncChannel = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(wrappingChannelSynchronously: context.channel)
            connection.metrics.http2.served(.http)
            context.fireChannelRead(head)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            if case .terminated = connection.streams.yield(asyncChannel) {
                context.close(promise: nil)
            }
        } catch {
            context.close(promise: nil)
        }
    }

    /// Answers with `status` and a JSON `error` body, and closes the stream.
    private func refuse(_ status: HTTPResponse.Status, _ message: String, headers: HTTPFields = [:], context: ChannelHandlerContext) {
        refuse(RouteRefusal(status: status, headers: headers, body: #"{"error":"\#(message)"}"#), context: context)
    }

    /// Answers with the refusal's status, headers and body, and closes the stream.
    private func refuse(_ refusal: RouteRefusal, context: ChannelHandlerContext) {
        connection.metrics.refused(status: refusal.status.code)
        connection.metrics.http2.served(.refused)
        context.write(wrapOutboundOut(.head(refusal.head(http2: true))), promise: nil)
        context.write(wrapOutboundOut(.body(context.channel.allocator.buffer(string: refusal.body))), promise: nil)
        // Then the stream closes, as a refused HTTP/1.1 upgrade closes its connection: a CONNECT
        // the client would keep open is reset once the answer is written.
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}
