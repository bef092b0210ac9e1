import NIOCore
import NIOHTTPTypes

/// Carries a WebSocket over an HTTP/2 stream (RFC 8441): the stream's DATA frames, as the HTTP
/// codec reads them, are the WebSocket's bytes, and the bytes the connection's
/// ``EventLoopWebSocketHandler`` writes go out as DATA frames, so that the handler serves the
/// stream as it serves a TCP connection.
///
/// The client's END_STREAM is its end of input, as a TCP FIN is. When the handler closes the
/// stream, END_STREAM goes first, so that a client that already sent its own sees the stream
/// end cleanly.
///
/// A dropped connection (``AbruptClose`` before the close, as `/_chaos/drop` does) skips
/// END_STREAM: the stream is reset (RST_STREAM, CANCEL), which is as abrupt as a TCP connection
/// that closes with no close frame.
final class HTTP2WebSocketStream: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = HTTPResponsePart

    private var ended = false
    /// The client's END_STREAM came in this read: passed on once the read is complete.
    private var inputEnded = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .body(let bytes):
            context.fireChannelRead(wrapInboundOut(bytes))
        case .end:
            // After the read completes: the handler answers what came with it (a close frame's
            // echo) and flushes, before it hears that input ended.
            inputEnded = true
        case .head:
            // A second request head on one stream is a protocol error.
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.fireChannelReadComplete()
        if inputEnded {
            inputEnded = false
            context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        context.write(wrapOutboundOut(.body(unwrapOutboundIn(data))), promise: promise)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        if event is AbruptClose {
            ended = true
            promise?.succeed()
            return
        }
        context.triggerUserOutboundEvent(event, promise: promise)
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard !ended, context.channel.isActive else {
            context.close(mode: mode, promise: promise)
            return
        }
        // END_STREAM after what was written (a close frame), and only then the close: closing a
        // stream at once resets it (RST_STREAM), and what was still on its way is lost. When the
        // client has ended its side too, the stream is closed by then.
        ended = true
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            let context = loopBound.value
            if context.channel.isActive {
                context.close(mode: mode, promise: promise)
            } else {
                promise?.succeed()
            }
        }
    }
}

/// Sent down a WebSocket's pipeline before a close that drops the connection: over HTTP/2 the
/// stream is then reset instead of ended (``HTTP2WebSocketStream``). Over TCP no handler takes
/// it, and the close is the same.
struct AbruptClose: Sendable {}
