package import NIOCore
package import NIOWebSocket

/// `WS /echo` on the event loop (``EventLoopWebSocketHandler``): every message back whole, with
/// its opcode, in order. It keeps no state, so every connection shares one.
package final class EchoService: EventLoopWebSocketService, Sendable {
    package static let shared = EchoService()

    package var connectionInfo: ConnectionInfo { .init(kind: .webSocket, route: "echo") }

    package func start(handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {}

    package func receive(_ message: consuming ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext)
    {
        handler.send(consume message, opcode: opcode, context: context)
    }

    package func stall(for duration: Duration) {}

    package func closing() {}

    package func end() {}
}
