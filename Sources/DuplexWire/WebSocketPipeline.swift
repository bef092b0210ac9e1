package import NIOCore
import NIOWebSocket

/// Where the handler that runs ``WebSocketEngine`` goes in an upgraded connection's pipeline, on
/// either end.
///
/// swift-nio's upgraders (server and client) add a `WebSocketFrameEncoder` and a
/// `ByteToMessageHandler(WebSocketFrameDecoder)`. The engine's handler reads the bytes itself
/// (``WebSocketFrameParser``) and encodes its own frames (``WebSocketFrameBytes``), so:
/// - it goes in front of the decoder, which then never sees a byte, and the decoder is removed;
/// - the encoder cannot be removed, so the handler writes at the encoder's context
///   (``wire(for:)``): what is written there goes past it, to the socket.
package enum WebSocketPipeline {
    /// Adds `handler` to an upgraded connection's pipeline, as above; last when there is no
    /// decoder (a pipeline a test built).
    package static func add(_ handler: some ChannelHandler, to pipeline: ChannelPipeline.SynchronousOperations) throws {
        guard let decoder = try? pipeline.handler(type: ByteToMessageHandler<WebSocketFrameDecoder>.self) else {
            return try pipeline.addHandler(handler)
        }
        try pipeline.addHandler(handler, position: .before(decoder))
        pipeline.removeHandler(decoder, promise: nil)
    }

    /// The context a handler writes its encoded frames at: NIO's encoder's, when the pipeline has
    /// one, else the handler's own.
    package static func wire(for context: ChannelHandlerContext) -> ChannelHandlerContext {
        (try? context.pipeline.syncOperations.context(handlerType: WebSocketFrameEncoder.self)) ?? context
    }
}
