import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// Notes the status (and `Retry-After`) of the first HTTP response head (the WebSocket handshake's, or a proxy's
/// answer to `CONNECT`), so that a refusal can say what was answered, then leaves the pipeline.
final class ResponseStatusRecorder: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = HTTPClientResponsePart

    let status = NIOLockedValueBox<Int?>(nil)
    /// The response's `Retry-After`, as sent.
    let retryAfter = NIOLockedValueBox<String?>(nil)

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data) {
            status.withLockedValue { $0 = Int(head.status.code) }
            retryAfter.withLockedValue { $0 = head.headers.first(name: "Retry-After") }
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        context.fireChannelRead(data)
    }
}
