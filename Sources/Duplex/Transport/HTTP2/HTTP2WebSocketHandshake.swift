import HTTPTypes
import NIOCore
import NIOHTTPTypes

/// The client's side of RFC 8441 on one HTTP/2 stream: it sends the extended CONNECT and
/// completes `response` with the server's answer (the first final response head). Every part
/// after a 200's head is passed on, to the WebSocket the caller installs behind it; of a refusal,
/// the first KiB of the body is read and given with the head (what the server said, for the
/// error), up to the body's end or the stream's.
///
/// An answer that does not come within `timeout` fails with
/// ``WebSocketError/Code/connectTimeout`` and resets the stream.
final class HTTP2WebSocketHandshake: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPRequestPart

    private let request: HTTPRequest
    private let timeout: TimeAmount
    let response: EventLoopPromise<Answer>
    private var sent = false
    private var answered = false
    private var timer: Scheduled<Void>?
    /// A refusal's head, while its body is read.
    private var refusal: (head: HTTPResponse, body: ByteBuffer)?

    /// The server's answer: its head, and for a refusal the start of its body (nil when empty).
    struct Answer {
        var head: HTTPResponse
        var body: String?
    }

    init(request: HTTPRequest, timeout: TimeAmount, response: EventLoopPromise<Answer>) {
        self.request = request
        self.timeout = timeout
        self.response = response
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { send(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        send(context: context)
        context.fireChannelActive()
    }

    private func send(context: ChannelHandlerContext) {
        guard !sent else { return }
        sent = true
        context.writeAndFlush(wrapOutboundOut(.head(request)), promise: nil)
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let timeout = self.timeout
        timer = context.eventLoop.scheduleTask(in: timeout) {
            let (handler, context) = loopBound.value
            handler.response.fail(WebSocketError(.connectTimeout, "the server did not answer the WebSocket's CONNECT within \(Duration(timeout))"))
            context.close(promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !answered else {
            context.fireChannelRead(data)
            return
        }
        switch unwrapInboundIn(data) {
        case .head(let head) where head.status.kind == .informational:
            return
        case .head(let head) where head.status == .ok:
            answered = true
            stopTimer()
            response.succeed(Answer(head: head))
        case .head(let head):
            stopTimer()
            refusal = (head, context.channel.allocator.buffer(capacity: 0))
        case .body(var part) where refusal != nil:
            if let slice = part.readSlice(length: min(part.readableBytes, WebSocketError.bodyLimit - refusal!.body.readableBytes)) {
                refusal!.body.writeImmutableBuffer(slice)
            }
            if refusal!.body.readableBytes >= WebSocketError.bodyLimit { answerRefusal() }
        case .end where refusal != nil:
            answerRefusal()
        case .body, .end:
            answered = true
            stopTimer()
            response.fail(WebSocketError(.handshakeFailed, "the server answered the WebSocket's CONNECT with no response head"))
            context.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        stopTimer()
        response.fail(error)
        context.fireErrorCaught(error)
    }

    /// Completes the answer with the refusal's head and what was read of its body.
    private func answerRefusal() {
        guard let refusal, !answered else { return }
        answered = true
        let body = String(buffer: refusal.body)
        response.succeed(Answer(head: refusal.head, body: body.isEmpty ? nil : body))
    }

    func channelInactive(context: ChannelHandlerContext) {
        answerRefusal()
        stopTimer()
        response.fail(WebSocketError(.connectionFailed, "the HTTP/2 stream closed before the server answered the WebSocket's CONNECT"))
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stopTimer()
    }

    private func stopTimer() {
        timer?.cancel()
        timer = nil
    }
}
