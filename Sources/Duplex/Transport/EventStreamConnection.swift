import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// One HTTP/1.1 request for an event stream, on a connection of its own made by
/// ``ClientConnector`` (so proxies, TLS, pins and the deadline are the WebSocket client's): the
/// request is sent, and ``open(_:headers:connector:readTimeout:)`` returns with the response head
/// and the body's bytes as an async sequence. The body is read only as fast as it is consumed
/// (`NIOAsyncChannel`'s backpressure), and a body silent for the read timeout fails with
/// ``SSEError/Code/readTimeout``. The response's end closes the connection.
enum EventStreamConnection {
    /// The response head and the connection that carries the body.
    struct Opened: Sendable {
        var head: HTTPResponseHead
        var body: NIOAsyncChannel<ByteBuffer, Never>
    }

    /// Sends `GET target` with `headers` and returns once the response head has arrived.
    /// - Throws: what ``ClientConnector/connect(_:)`` throws.
    static func open(_ target: String, headers: HTTPHeaders, connector: ClientConnector, readTimeout: Duration) async throws -> Opened {
        try await connector.connect { channel in
            let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: target, headers: headers)
            let response = EventStreamResponseHandler(request: head, readTimeout: TimeAmount(readTimeout), headPromise: channel.eventLoop.makePromise())
            let operations = channel.pipeline.syncOperations
            try operations.addHTTPClientHandlers()
            try operations.addHandler(response)
            let body = try NIOAsyncChannel<ByteBuffer, Never>(wrappingChannelSynchronously: channel)
            return response.headPromise.futureResult.map { Opened(head: $0, body: body) }
        }
    }
}

/// Writes the request once added, completes `headPromise` with the response head, passes the
/// body's bytes on, and closes the connection at the response's end.
///
/// After the head (before it, the connector's deadline rules), a read asked for that brings
/// nothing within `readTimeout` fails the connection with ``SSEError/Code/readTimeout``. The timer
/// runs only while a read is wanted: a consumer that is behind holds reads back (backpressure),
/// and that is not the server's silence.
private final class EventStreamResponseHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = Never
    typealias OutboundOut = HTTPClientRequestPart

    private let request: HTTPRequestHead
    private let readTimeout: TimeAmount
    let headPromise: EventLoopPromise<HTTPResponseHead>
    private var headArrived = false
    private var timer: Scheduled<Void>?

    init(request: HTTPRequestHead, readTimeout: TimeAmount, headPromise: EventLoopPromise<HTTPResponseHead>) {
        self.request = request
        self.readTimeout = readTimeout
        self.headPromise = headPromise
    }

    func handlerAdded(context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(.head(request)), promise: nil)
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
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        headPromise.fail(error)
        context.fireErrorCaught(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        stopTimer()
        headPromise.fail(ChannelError.eof)
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
