package import NIOCore
package import NIOHTTPTypes

/// Carries a WebSocket over an HTTP/2 stream (RFC 8441), on either end: the stream's DATA
/// frames, as swift-nio-extras' HTTP codec reads them, are the WebSocket's bytes, and the bytes
/// the connection's WebSocket handler writes go out as DATA frames, so that the handler serves
/// the stream as it serves a TCP connection.
///
/// The peer's END_STREAM is its end of input, as a TCP FIN is; it is passed on
/// (`ChannelEvent.inputClosed`) once the read that brought it is complete, so that the handler
/// first answers what came with it (a close frame's echo). When the handler closes the stream,
/// END_STREAM goes first and the close follows once it is written: closing a stream at once
/// resets it, and what was still on its way would be lost. When the peer has ended its side
/// too, the stream is closed by then.
///
/// A dropped connection (``AbruptClose`` before the close) skips END_STREAM: the stream is
/// reset (RST_STREAM, CANCEL), which is as abrupt as a TCP connection that closes with no close
/// frame.
package final class HTTP2WebSocketStream<Parts: HTTP2WebSocketStreamParts>: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = Parts.Inbound
    package typealias InboundOut = ByteBuffer
    package typealias OutboundIn = ByteBuffer
    package typealias OutboundOut = Parts.Outbound

    private var ended = false
    /// The peer's END_STREAM came in this read: passed on once the read is complete.
    private var inputEnded = false

    package init() {}

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch Parts.classify(unwrapInboundIn(data)) {
        case .bytes(let bytes):
            context.fireChannelRead(wrapInboundOut(bytes))
        case .end:
            inputEnded = true
        case .head:
            // A second head on one stream is a protocol error.
            context.close(promise: nil)
        }
    }

    package func channelReadComplete(context: ChannelHandlerContext) {
        context.fireChannelReadComplete()
        if inputEnded {
            inputEnded = false
            context.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        }
    }

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        context.write(wrapOutboundOut(Parts.body(unwrapOutboundIn(data))), promise: promise)
    }

    package func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        if event is AbruptClose {
            ended = true
            promise?.succeed()
            return
        }
        context.triggerUserOutboundEvent(event, promise: promise)
    }

    package func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        guard !ended, context.channel.isActive else {
            context.close(mode: mode, promise: promise)
            return
        }
        ended = true
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(Parts.end)).whenComplete { _ in
            let context = loopBound.value
            if context.channel.isActive {
                context.close(mode: mode, promise: promise)
            } else {
                promise?.succeed()
            }
        }
    }
}

/// What one end of a stream reads and writes: requests on the server, responses on the client.
package protocol HTTP2WebSocketStreamParts {
    associatedtype Inbound
    associatedtype Outbound
    /// What an inbound part is to the WebSocket.
    static func classify(_ part: Inbound) -> HTTP2WebSocketInbound
    /// The part that carries `bytes`.
    static func body(_ bytes: ByteBuffer) -> Outbound
    /// The part that ends the stream (END_STREAM).
    static var end: Outbound { get }
}

/// An inbound part, as the WebSocket sees it.
package enum HTTP2WebSocketInbound {
    case bytes(ByteBuffer)
    case end
    case head
}

/// The server's end: it reads the request's body and writes the response's.
package enum HTTP2WebSocketServerParts: HTTP2WebSocketStreamParts {
    package static func classify(_ part: HTTPRequestPart) -> HTTP2WebSocketInbound {
        switch part {
        case .head: .head
        case .body(let bytes): .bytes(bytes)
        case .end: .end
        }
    }

    package static func body(_ bytes: ByteBuffer) -> HTTPResponsePart { .body(bytes) }
    package static var end: HTTPResponsePart { .end(nil) }
}

/// The client's end: it reads the response's body and writes the request's.
package enum HTTP2WebSocketClientParts: HTTP2WebSocketStreamParts {
    package static func classify(_ part: HTTPResponsePart) -> HTTP2WebSocketInbound {
        switch part {
        case .head: .head
        case .body(let bytes): .bytes(bytes)
        case .end: .end
        }
    }

    package static func body(_ bytes: ByteBuffer) -> HTTPRequestPart { .body(bytes) }
    package static var end: HTTPRequestPart { .end(nil) }
}

/// Sent down a WebSocket's pipeline before a close that drops the connection: over HTTP/2 the
/// stream is then reset instead of ended (``HTTP2WebSocketStream``). Over TCP no handler takes
/// it, and the close is the same.
package struct AbruptClose: Sendable {
    package init() {}
}
