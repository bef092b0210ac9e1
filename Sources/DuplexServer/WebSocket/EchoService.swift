import NIOCore
import NIOWebSocket

/// `WS /echo` on the event loop (``EventLoopWebSocketHandler``): every message back whole, with
/// its opcode, in order. It keeps no state, so every connection shares one.
final class EchoService: EventLoopWebSocketService, Sendable {
    static let shared = EchoService()

    var connectionInfo: ConnectionInfo { .init(kind: .webSocket, route: "echo") }

    func start(handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {}

    func receive(_ message: consuming ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        handler.send(consume message, opcode: opcode, context: context)
    }

    func stall(for duration: Duration) {}

    func closing() {}

    func end() {}
}
