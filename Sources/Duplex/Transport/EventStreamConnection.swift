import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTP2

/// One request for an event stream: over HTTP/1.1 on a connection of its own made by
/// ``ClientConnector`` (so proxies, TLS, pins and the deadline are the WebSocket client's), or
/// over HTTP/2 on a stream of the origin's shared connection (``HTTP2ClientPool``). The request
/// is sent, and ``open(endpoint:headers:configuration:)`` returns with the response head and
/// the body's bytes as an async sequence. The body is read only as fast as it is consumed
/// (`NIOAsyncChannel`'s backpressure, and over HTTP/2 its flow-control window), and a body silent
/// for the read timeout fails with ``SSEError/Code/readTimeout``. The response's end closes the
/// connection, or the stream.
struct EventStreamConnection: EventStreamTransport {
    /// Sends `method` for `endpoint` with `headers` and `body` over the HTTP the configuration
    /// prefers, and returns once the response head has arrived.
    /// - Throws: what ``ClientConnector/connect(_:)`` throws; with
    ///   ``HTTPVersionPreference/http2``, a ``WebSocketError/Code/handshakeFailed`` when the server
    ///   has no HTTP/2 or the URL is not `https://`.
    func open(
        endpoint: WebSocketRequest.Endpoint,
        method: HTTPMethod,
        headers: HTTPHeaders,
        body: Data?,
        configuration: SSEConfiguration
    ) async throws -> EventStreamResponse {
        let request = Request(head: HTTPRequestHead(version: .http1_1, method: method, uri: endpoint.target, headers: headers), body: body)
        let key = HTTP2ClientPool.Key(endpoint: endpoint, settings: configuration)
        switch configuration.httpVersion {
        case .http2 where !endpoint.secure:
            throw WebSocketError(.handshakeFailed, "SSE over HTTP/2 needs https://; this URL is http://")
        case .http2:
            do {
                return try await Self.openHTTP2(endpoint: endpoint, request: request, configuration: configuration)
            } catch let unavailable as HTTP2ClientConnection.Unavailable {
                throw WebSocketError(.handshakeFailed, "\(endpoint.host):\(endpoint.port): \(unavailable.reason)")
            }
        case .automatic where endpoint.secure && !HTTP2ClientPool.shared.isWithoutHTTP2(key, forWebSockets: false):
            do {
                return try await Self.openHTTP2(endpoint: endpoint, request: request, configuration: configuration)
            } catch let unavailable as HTTP2ClientConnection.Unavailable {
                HTTP2ClientPool.shared.markWithout(unavailable, key)
            }
        default:
            break
        }
        let connector = ClientConnector(endpoint: endpoint, settings: configuration, waterMark: nil, stageName: "the request")
        let readTimeout = TimeAmount(configuration.readTimeout)
        return try await connector.connect { channel in
            let response = EventStreamResponseHandler(request: request, readTimeout: readTimeout, headPromise: channel.eventLoop.makePromise())
            let operations = channel.pipeline.syncOperations
            try operations.addHTTPClientHandlers()
            try operations.addHandler(response)
            let body = try NIOAsyncChannel<ByteBuffer, Never>(wrappingChannelSynchronously: channel)
            return response.headPromise.futureResult.map { EventStreamResponse(head: $0, body: Body(channel: body)) }
        }
    }

    /// The request on a stream of the origin's HTTP/2 connection, through swift-nio-http2's
    /// HTTP/1 codec (which makes `Host` the `:authority`), so that the same response handler
    /// reads it. The response head must come within the connect timeout.
    private static func openHTTP2(endpoint: WebSocketRequest.Endpoint, request: Request, configuration: SSEConfiguration) async throws
        -> EventStreamResponse
    {
        let leasing: @Sendable () async throws -> HTTP2ClientPool.Lease = {
            try await HTTP2ClientPool.shared.lease(
                endpoint: endpoint,
                settings: configuration,
                preference: configuration.httpVersion,
                waterMark: .init(low: 32 * 1024, high: 64 * 1024),
                forWebSockets: false
            )
        }
        let readTimeout = TimeAmount(configuration.readTimeout)
        let connectTimeout = TimeAmount(configuration.connectTimeout)
        // A request the server did not act on (refused, or crossed by GOAWAY) goes once more on
        // a new connection.
        return try await HTTP2ClientPool.shared.openStream(leasing: leasing) { (channel, opened: EventLoopPromise<EventStreamResponse>) in
            let response = EventStreamResponseHandler(request: request, readTimeout: readTimeout, headPromise: channel.eventLoop.makePromise())
            let operations = channel.pipeline.syncOperations
            try operations.addHandler(HTTP2FramePayloadToHTTP1ClientCodec(httpProtocol: .https))
            try operations.addHandler(response)
            let body = try NIOAsyncChannel<ByteBuffer, Never>(wrappingChannelSynchronously: channel)
            let headPromise = response.headPromise
            let deadline = channel.eventLoop.scheduleTask(in: connectTimeout) {
                headPromise.fail(
                    WebSocketError(
                        .connectTimeout, "the request to \(endpoint.host):\(endpoint.port) was not answered within \(Duration(connectTimeout))"))
                channel.close(promise: nil)
            }
            headPromise.futureResult.whenComplete { result in
                deadline.cancel()
                if case .failure = result { channel.close(promise: nil) }
                opened.completeWith(result.map { EventStreamResponse(head: $0, body: Body(channel: body)) })
            }
        }
    }
}

extension EventStreamConnection {
    /// The request's head and body.
    struct Request: Sendable {
        var head: HTTPRequestHead
        var body: Data?
    }

    /// The body as the connection's channel reads it: read only as fast as it is consumed.
    struct Body: EventStreamBody {
        let channel: NIOAsyncChannel<ByteBuffer, Never>

        func readThenClose(_ read: (inout any EventStreamChunks) async throws -> Void) async throws {
            try await channel.executeThenClose { inbound, _ in
                var chunks: any EventStreamChunks = inbound.makeAsyncIterator()
                try await read(&chunks)
            }
        }

        func close() async {
            try? await channel.channel.close()
        }

        func close(after delay: Duration) -> @Sendable () -> Void {
            let channel = channel.channel
            let timer = channel.eventLoop.scheduleTask(in: TimeAmount(delay)) { channel.close(promise: nil) }
            return { timer.cancel() }
        }
    }
}

extension NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator: EventStreamChunks {}

/// Writes the request once added, completes `headPromise` with the response head, passes the
/// body's bytes on, and closes the connection at the response's end. A connection that closes
/// after the head and before the response's end is a drop: it fails with
/// ``SSEError/Code/connectionFailed``, so that a clean end and a drop are never confused.
///
/// After the head (before it, the connector's deadline rules), a read asked for that brings
/// nothing within `readTimeout` fails the connection with ``SSEError/Code/readTimeout``. The timer
/// runs only while a read is wanted: a consumer that is behind holds reads back (backpressure),
/// and that is not the server's silence.
final class EventStreamResponseHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = Never
    typealias OutboundOut = HTTPClientRequestPart

    private let request: EventStreamConnection.Request
    private let readTimeout: TimeAmount
    let headPromise: EventLoopPromise<HTTPResponseHead>
    private var headArrived = false
    /// The response's end arrived, or the connection already failed: its close is no drop.
    private var settled = false
    private var timer: Scheduled<Void>?

    init(request: EventStreamConnection.Request, readTimeout: TimeAmount, headPromise: EventLoopPromise<HTTPResponseHead>) {
        self.request = request
        self.readTimeout = readTimeout
        self.headPromise = headPromise
    }

    func handlerAdded(context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(.head(request.head)), promise: nil)
        if let body = request.body, !body.isEmpty {
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    func read(context: ChannelHandlerContext) {
        if headArrived, timer == nil {
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            let timeout = readTimeout
            timer = context.eventLoop.scheduleTask(in: timeout) {
                let context = loopBound.value
                context.fireErrorCaught(SSEError(.readTimeout, "no bytes arrived within the read timeout (\(Duration(timeout)))"))
                context.close(promise: nil)
            }
        }
        context.read()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        stopTimer()
        switch unwrapInboundIn(data) {
        case .head(let head):
            headArrived = true
            headPromise.succeed(head)
        case .body(let bytes):
            context.fireChannelRead(wrapInboundOut(bytes))
        case .end:
            settled = true
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        settled = true
        headPromise.fail(error)
        context.fireErrorCaught(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        stopTimer()
        headPromise.fail(ChannelError.eof)
        if headArrived, !settled {
            settled = true
            context.fireErrorCaught(
                SSEError(.connectionFailed, "the connection closed before the response ended (a drop, not the server's end of the stream)"))
        }
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stopTimer()
        headPromise.fail(ChannelError.eof)
    }

    private func stopTimer() {
        timer?.cancel()
        timer = nil
    }
}

extension Duration {
    init(_ amount: TimeAmount) {
        self = .nanoseconds(amount.nanoseconds)
    }
}
