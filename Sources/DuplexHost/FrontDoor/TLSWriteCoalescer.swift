import NIOCore

/// Sits just after NIOSSL on a TLS connection and joins the writes made between two flushes
/// into one buffer, so that NIOSSL encrypts them in full TLS records (16 KiB each) instead of
/// one record per WebSocket frame and header: on pipelined echoes that was five sixths of the
/// CPU (docs/benchmarks.md). Writes of 64 KiB or more pass as they are, after whatever was
/// joined before them, in order.
final class TLSWriteCoalescer: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Writes are joined up to this many bytes (four full TLS records); larger ones are not
    /// copied.
    static let joinLimit = 64 * 1024

    private var pending: ByteBuffer?
    private var promises: [EventLoopPromise<Void>] = []

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let buffer = unwrapOutboundIn(data)
        if buffer.readableBytes + (pending?.readableBytes ?? 0) > Self.joinLimit {
            writePending(context: context)
            guard buffer.readableBytes < Self.joinLimit else {
                context.write(data, promise: promise)
                return
            }
        }
        if pending == nil {
            pending = context.channel.allocator.buffer(capacity: max(buffer.readableBytes, 1024))
        }
        var incoming = buffer
        pending!.writeBuffer(&incoming)
        if let promise { promises.append(promise) }
    }

    func flush(context: ChannelHandlerContext) {
        writePending(context: context)
        context.flush()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if pending != nil {
            writePending(context: context)
            context.flush()
        }
        context.close(mode: mode, promise: promise)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        writePending(context: context)
    }

    /// Passes on what was joined, completing every write's promise with the joined write's.
    private func writePending(context: ChannelHandlerContext) {
        guard let buffer = pending else { return }
        pending = nil
        let waiting = promises
        promises = []
        switch waiting.count {
        case 0:
            context.write(wrapOutboundOut(buffer), promise: nil)
        case 1:
            context.write(wrapOutboundOut(buffer), promise: waiting[0])
        default:
            let joined = context.eventLoop.makePromise(of: Void.self)
            joined.futureResult.whenComplete { result in
                for promise in waiting { promise.completeWith(result) }
            }
            context.write(wrapOutboundOut(buffer), promise: joined)
        }
    }
}
