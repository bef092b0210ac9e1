package import DuplexSchema
package import DuplexWire
import Foundation
package import HTTPTypes
import Hummingbird
package import HummingbirdCore
package import HummingbirdWebSocket
package import Logging
import NIOConcurrencyHelpers
package import NIOCore
import NIOHTTP1
package import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOTLS
import NIOWebSocket

/// How a WebSocket route serves an upgraded connection: the handlers it installs on the
/// connection's event loop (``EventLoopWebSocketHandler`` and a service), with no task per
/// connection. They get the permessage-deflate agreement, if the handshake made one, and apply
/// it.
package struct WebSocketService: Sendable {
    package let install: @Sendable (_ channel: any Channel, _ deflate: DeflateAgreement?) throws -> Void

    package init(_ install: @escaping @Sendable (_ channel: any Channel, _ deflate: DeflateAgreement?) throws -> Void) {
        self.install = install
    }
}

/// What a route answers a WebSocket upgrade request, on the connection's event loop.
package enum UpgradeAnswer: Sendable {
    /// Upgrade, adding `headers` to the response (a subprotocol, say), and serve the connection
    /// with `service`.
    case accept(HTTPFields, WebSocketService)
    /// Answer `status` with `headers` and `body` instead, and close the connection (HTTP/1.1)
    /// or the stream (HTTP/2).
    case refuse(RouteRefusal)
    /// Answer once the future `answer` makes for the request's channel (HTTP/2: its stream)
    /// completes (a proxy route's upstream handshake, say); a failed future answers 502 with the
    /// error. The channel reads nothing meanwhile, and may close before the answer.
    case later(@Sendable (any Channel) -> EventLoopFuture<UpgradeAnswer>)

    /// The answer once known, on `channel`'s event loop: a `later` answer's own, however deep,
    /// and a failure as a 502 that says why.
    package func resolved(for channel: any Channel) -> EventLoopFuture<UpgradeAnswer> {
        let eventLoop = channel.eventLoop
        guard case .later(let answer) = self else { return eventLoop.makeSucceededFuture(self) }
        return answer(channel).hop(to: eventLoop).flatMap { $0.resolved(for: channel) }.flatMapErrorThrowing { error in
            .refuse(RouteRefusal(status: .badGateway, body: RouteRefusal.errorBody("\(error)")))
        }
    }
}

/// A plain answer a route gives on the event loop: a refused WebSocket upgrade, or a stream
/// route's refusal (``StreamAnswer/respond(_:)``), with a status of the route's choosing.
package struct RouteRefusal: Sendable {
    package var status: HTTPResponse.Status
    package var headers: HTTPFields = [:]
    /// The body, sent as is; its type is `headers`' `Content-Type`, JSON when it names none.
    package var body: String

    /// A refusal with `status`, `headers` and `body`.
    package init(status: HTTPResponse.Status, headers: HTTPFields = [:], body: String) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// `{"error": message}`, with `message` escaped as JSON.
    package static func errorBody(_ message: String) -> String {
        let data = (try? JSONSerialization.data(withJSONObject: ["error": message], options: [.sortedKeys])) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// The refusal of a path that serves no WebSocket.
    package static let noRoute = RouteRefusal(status: .badRequest, body: #"{"error":"no WebSocket is served at this path"}"#)

    /// The response head, with the body's length and, where `closes`, `Connection: close` (for
    /// HTTP/1.1; an HTTP/2 head drops it).
    package func head(http2: Bool, closes: Bool = true) -> HTTPResponse {
        var fields = headers
        if fields[.contentType] == nil { fields[.contentType] = "application/json" }
        fields[.contentLength] = String(body.utf8.count)
        if !http2 && closes { fields[.connection] = "close" }
        return HTTPResponse(status: status, headerFields: fields)
    }
}

/// Each connection of the server: HTTP/1.1 through Hummingbird's responder, or a WebSocket
/// upgrade, or an SSE stream. It does what hummingbird-websocket's
/// `HTTP1WebSocketUpgradeChannel` does, except that every upgraded connection is served on its
/// event loop (``WebSocketService``): the route is chosen there, `handle(value:)` returns at
/// once, and no task stays behind for it. So is a connection whose first request is an SSE
/// stream (``EventStreamHandler``); on any other, the same handler takes stream requests in
/// front of Hummingbird.
///
/// On a TLS listener that offers HTTP/2 (`DuplexServerHTTP2`), ALPN chooses first: a
/// connection that negotiated `h2` is served by ``HTTP2Connection``, whose WebSocket streams
/// run on the event loop through the same routes and services, and whose HTTP requests this
/// connection's task serves.
package struct DuplexChildChannel: ServerChildChannel, HTTPChannelHandler {
    /// What became of the connection once its first request head was read (HTTP/1.1), or once
    /// it negotiated HTTP/2.
    package enum UpgradeResult: Sendable {
        case servedOnEventLoop
        case notUpgraded(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        case failedUpgrade(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, Logger, RouteRefusal)
        case http2(HTTP2Streams)
    }

    /// What ALPN chose: HTTP/1.1, whose first request is still to come, or HTTP/2.
    private enum Negotiated: Sendable {
        case http1(EventLoopFuture<UpgradeResult>)
        case http2(HTTP2Streams)
    }

    /// What an HTTP/2 connection needs besides the routes; nil where `h2` is not offered.
    package struct HTTP2Serving: Sendable {
        package var settings: HTTP2Limits
        /// How long a new connection may take to open its first stream (the request head timeout).
        package var firstStreamTimeout: Duration
        package var refusal: RefusalGate
        package var metrics: ServerMetrics
        package var connections: HTTP2ConnectionSet

        /// HTTP/2 with `settings`, its first stream within `firstStreamTimeout`.
        package init(
            settings: HTTP2Limits, firstStreamTimeout: Duration, refusal: RefusalGate, metrics: ServerMetrics, connections: HTTP2ConnectionSet
        ) {
            self.settings = settings
            self.firstStreamTimeout = firstStreamTimeout
            self.refusal = refusal
            self.metrics = metrics
            self.connections = connections
        }
    }

    package struct Value: ServerChildChannelValue {
        let upgradeResult: EventLoopFuture<UpgradeResult>
        package let channel: any Channel
    }

    /// Answers a WebSocket upgrade request, on the event loop: the response headers to add (a
    /// subprotocol, say) and the service, or a refusal.
    package typealias Router = @Sendable (Request) -> UpgradeAnswer

    package let responder: HTTPChannelHandler.Responder
    package let route: Router
    package let configuration: HTTP1WebSocketUpgradeChannel.Configuration
    /// The server's permessage-deflate settings; nil declines every offer.
    package let compression: PerMessageDeflate?
    /// Whether the connection is over TLS (requests are `https`).
    package let secure: Bool
    /// HTTP/2, when the listener's ALPN offers `h2`.
    package let http2: HTTP2Serving?
    /// The SSE streams' routes and limits.
    package let streams: EventStreamServing

    package init(
        responder: @escaping HTTPChannelHandler.Responder,
        configuration: HTTP1WebSocketUpgradeChannel.Configuration,
        compression: PerMessageDeflate?,
        secure: Bool,
        http2: HTTP2Serving? = nil,
        streams: EventStreamServing,
        route: @escaping Router
    ) {
        self.secure = secure
        self.http2 = http2
        self.streams = streams
        self.responder = Self.upgradeRedirecting(responder)
        self.configuration = configuration
        self.compression = compression
        self.route = route
    }

    package func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard let http2 else {
            return channel.eventLoop.makeCompletedFuture {
                Value(upgradeResult: try setupHTTP1(channel: channel, logger: logger), channel: channel)
            }
        }
        // ALPN's answer comes with the TLS handshake: until then the handler holds the bytes read.
        let negotiation = NIOTypedApplicationProtocolNegotiationHandler<Negotiated> { result in
            channel.eventLoop.makeCompletedFuture {
                if case .negotiated("h2") = result {
                    return .http2(
                        try HTTP2Connection.configure(
                            channel,
                            settings: http2.settings,
                            firstStreamTimeout: http2.firstStreamTimeout,
                            route: route,
                            eventStreams: streams,
                            compression: compression,
                            refusal: http2.refusal,
                            metrics: http2.metrics,
                            registry: http2.connections
                        )
                    )
                }
                return .http1(try setupHTTP1(channel: channel, logger: logger))
            }
        }
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(negotiation)
            let result = negotiation.protocolNegotiationResult.flatMap { negotiated -> EventLoopFuture<UpgradeResult> in
                switch negotiated {
                case .http1(let upgrade): upgrade
                case .http2(let streams): channel.eventLoop.makeSucceededFuture(.http2(streams))
                }
            }
            return Value(upgradeResult: result, channel: channel)
        }
    }

    /// Configures `channel` for HTTP/1.1 with WebSocket upgrades.
    /// - Returns: what becomes of the connection once its first request head is read.
    private func setupHTTP1(channel: any Channel, logger: Logger) throws -> EventLoopFuture<UpgradeResult> {
        let upgradeAttempted = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
        let refused = NIOLoopBoundBox(RouteRefusal.noRoute, eventLoop: channel.eventLoop)
        let chosen = NIOLoopBoundBox<(service: WebSocketService, deflate: DeflateAgreement?)?>(nil, eventLoop: channel.eventLoop)
        let firstHead = NIOLoopBoundBox<HTTPRequestHead?>(nil, eventLoop: channel.eventLoop)
        let streams = self.streams
        let configuration = self.configuration
        let compression = self.compression
        let route = self.route
        let secure = self.secure
        let upgrader = NIOTypedWebSocketServerUpgrader<UpgradeResult>(
            maxFrameSize: configuration.ws.maxFrameSize,
            // Frames the decoder refuses are answered by the connection's handler, once
            // (EventLoopWebSocketHandler.errorCaught).
            enableAutomaticErrorHandling: false,
            shouldUpgrade: { channel, head in
                upgradeAttempted.value = true
                let request: Request
                do {
                    request = Request(head: try HTTPRequest(head, secure: secure, splitCookie: false), body: .init(buffer: .init()))
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
                return route(request).resolved(for: channel).map { answer -> HTTPHeaders? in
                    let (headers, service): (HTTPFields, WebSocketService)
                    switch answer {
                    case .accept(let accepted, let chosen): (headers, service) = (accepted, chosen)
                    case .refuse(let refusal):
                        refused.value = refusal
                        return nil
                    case .later:
                        preconditionFailure("a resolved answer is not later")
                    }
                    var responseHeaders = headers
                    let deflate = compression.flatMap {
                        PerMessageDeflateNegotiation.answer(offers: request.headers[values: .secWebSocketExtensions], settings: $0)
                    }
                    if let deflate { responseHeaders[.secWebSocketExtensions] = deflate.answer }
                    chosen.value = (service, deflate?.agreement)
                    return HTTPHeaders(responseHeaders)
                }
            },
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    guard let (service, deflate) = chosen.value else {
                        preconditionFailure("an upgrade always follows a chosen service")
                    }
                    try service.install(channel, deflate)
                    return .servedOnEventLoop
                }
            }
        )
        let serverUpgradeConfiguration = NIOTypedHTTPServerUpgradeConfiguration(
            upgraders: [upgrader],
            notUpgradingCompletionHandler: { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: secure))
                    try channel.pipeline.syncOperations.addHandlers(configuration.http1.additionalChannelHandlers())
                    // A connection whose first request is a stream is served on the event loop,
                    // and closes when the stream ends.
                    let first = firstHead.value.flatMap { try? HTTPRequest($0, secure: secure, splitCookie: false) }
                    if !upgradeAttempted.value, let first, streams.route(first) != nil {
                        try channel.pipeline.syncOperations.addHandler(EventStreamHandler(serving: streams, placement: .streamOnly))
                        return .servedOnEventLoop
                    }
                    try channel.pipeline.syncOperations.addHandler(
                        HTTPConnectionStateHandler(idleTimeout: configuration.http1.idleTimeout.map { .init($0) }, logger: logger)
                    )
                    try channel.pipeline.syncOperations.addHandler(EventStreamHandler(serving: streams, placement: .keepAlive))
                    let asyncChannel = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                        wrappingChannelSynchronously: channel,
                        configuration: .init(isOutboundHalfClosureEnabled: true)
                    )
                    return upgradeAttempted.value ? .failedUpgrade(asyncChannel, logger, refused.value) : .notUpgraded(asyncChannel)
                }
            }
        )
        var pipeline = NIOUpgradableHTTPServerPipelineConfiguration<UpgradeResult>(upgradeConfiguration: serverUpgradeConfiguration)
        pipeline.enablePipelining = false  // NIOAsyncChannel pipelines HTTP
        pipeline.enableErrorHandling = false  // Hummingbird answers errors
        pipeline.enableResponseHeaderValidation = false  // swift-http-types validates
        pipeline.decoderConfiguration.maxHeaderFieldSize = configuration.http1.httpDecoder.maxHeaderFieldSize
        pipeline.decoderConfiguration.maxHeaderListSize = configuration.http1.httpDecoder.maxHeaderListSize
        pipeline.decoderConfiguration.maxHeaderFieldCount = configuration.http1.httpDecoder.maxHeaderFieldCount
        let result = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(configuration: pipeline)
        let upgradeHandler = try channel.pipeline.syncOperations.handler(type: NIOTypedHTTPServerUpgradeHandler<UpgradeResult>.self)
        try channel.pipeline.syncOperations.addHandler(FirstRequestHead(firstHead), position: .before(upgradeHandler))
        return result
    }

    package func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.upgradeResult.get() {
            case .servedOnEventLoop:
                return
            case .notUpgraded(let http1):
                await handleHTTP(asyncChannel: http1, logger: logger)
            case .failedUpgrade(let http1, let logger, let refusal):
                logger.debug("WebSocket upgrade refused", metadata: ["status": "\(refusal.status.code)"])
                await refuseUpgrade(http1, refusal)
            case .http2(let streams):
                // Each HTTP request on the connection is a child task; WebSocket streams are
                // served on the event loop and never come here.
                await withDiscardingTaskGroup { group in
                    for await stream in streams {
                        group.addTask { await handleHTTP(asyncChannel: stream, logger: logger) }
                    }
                }
            }
        } catch let error as ChannelError where error == .inputClosed {
            logger.trace("the connection closed before its first request")
        } catch {
            logger.debug("connection setup failed", metadata: ["error": "\(error)"])
        }
    }

    /// A refused upgrade: the route's status, headers and body (400 where no route serves a
    /// WebSocket), and the connection closes.
    private func refuseUpgrade(_ asyncChannel: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, _ refusal: RouteRefusal) async {
        try? await asyncChannel.executeThenClose { _, outbound in
            try await outbound.write(contentsOf: [.head(refusal.head(http2: false)), .body(ByteBuffer(string: refusal.body)), .end(nil)])
        }
    }

    /// An upgrade asked for on a connection already serving HTTP cannot be carried out there
    /// (swift-nio upgrades only a connection's first request): redirect to the same URL and
    /// close, so the client asks again on a new connection, as hummingbird-websocket does.
    static func upgradeRedirecting(_ responder: @escaping HTTPChannelHandler.Responder) -> HTTPChannelHandler.Responder {
        struct RedirectClose: Error {}
        return { request, writer, channel in
            guard request.headers[.upgrade] == "websocket" else {
                return try await responder(request, writer, channel)
            }
            var path = request.uri.path
            if let query = request.uri.query { path += "?\(query)" }
            try await writer.writeResponse(HTTPResponse(status: .temporaryRedirect, headerFields: [.connection: "close", .location: path]))
            throw RedirectClose()
        }
    }
}

/// Notes a connection's first request head for ``DuplexChildChannel``, which chooses how to serve
/// the connection by it, then steps aside.
private final class FirstRequestHead: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias InboundOut = HTTPServerRequestPart

    private let head: NIOLoopBoundBox<HTTPRequestHead?>

    init(_ head: NIOLoopBoundBox<HTTPRequestHead?>) {
        self.head = head
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .head(let head) = unwrapInboundIn(data) else {
            context.fireChannelRead(data)
            return
        }
        self.head.value = head
        context.fireChannelRead(data)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}
