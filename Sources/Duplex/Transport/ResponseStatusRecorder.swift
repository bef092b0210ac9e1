import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// Notes the status (and `Retry-After`) of the first HTTP response head (the WebSocket handshake's, or a proxy's
/// answer to `CONNECT`), so that a refusal can say what was answered, then leaves the pipeline. With a body
/// limit, it stays for the body too and keeps its first bytes (what a refusing server said, for the error).
final class ResponseStatusRecorder: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = HTTPClientResponsePart

    let status = NIOLockedValueBox<Int?>(nil)
    /// The response's `Retry-After`, as sent.
    let retryAfter = NIOLockedValueBox<String?>(nil)
    /// Every header of the response, in order.
    let headers = NIOLockedValueBox<[HTTPHeader]>([])
    /// The first ``bodyLimit`` bytes of the response's body, once read (nil: none, or no limit).
    let body = NIOLockedValueBox<String?>(nil)
    /// How many bytes of the body to keep; 0: the recorder leaves after the head.
    let bodyLimit: Int
    private let collected = NIOLockedValueBox<ByteBuffer?>(nil)
    /// Whether the response was read as far as it is kept, and who waits for that.
    private let read = NIOLockedValueBox<(done: Bool, waiter: EventLoopPromise<Void>?)>((false, nil))

    init(bodyLimit: Int = 0) {
        self.bodyLimit = bodyLimit
    }

    /// Succeeds once the response was read as far as the recorder keeps it: its head, and with a
    /// body limit, its body up to the limit or its end (or the connection's).
    func responseRead(on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        let promise = eventLoop.makePromise(of: Void.self)
        let done = read.withLockedValue { read -> Bool in
            if !read.done { read.waiter = promise }
            return read.done
        }
        if done { promise.succeed() }
        return promise.futureResult
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            status.withLockedValue { $0 = Int(head.status.code) }
            retryAfter.withLockedValue { $0 = head.headers.first(name: "Retry-After") }
            headers.withLockedValue { $0 = head.headers.map { HTTPHeader(name: $0.name, value: $0.value) } }
            context.fireChannelRead(data)
            if bodyLimit == 0 { finish(context: context) }
        case .body(var part):
            let full = collected.withLockedValue { kept -> Bool in
                var buffer = kept ?? ByteBuffer()
                if let slice = part.readSlice(length: min(part.readableBytes, bodyLimit - buffer.readableBytes)) {
                    buffer.writeImmutableBuffer(slice)
                }
                kept = buffer
                return buffer.readableBytes >= bodyLimit
            }
            context.fireChannelRead(data)
            if full { finish(context: context) }
        case .end:
            context.fireChannelRead(data)
            finish(context: context)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        complete()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        complete()
    }

    private func finish(context: ChannelHandlerContext) {
        complete()
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }

    private func complete() {
        if bodyLimit > 0 {
            let text = collected.withLockedValue { $0.map { String(buffer: $0) } }
            body.withLockedValue { if $0 == nil { $0 = text ?? "" } }
        }
        let waiter = read.withLockedValue { read -> EventLoopPromise<Void>? in
            defer { read = (true, nil) }
            return read.waiter
        }
        waiter?.succeed()
    }
}
