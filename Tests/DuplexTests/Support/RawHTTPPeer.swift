import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL

/// A TCP server for tests, on 127.0.0.1 and a free port, that reads each connection's request
/// head (up to CRLF CRLF) and answers with the exact bytes a script gives, then keeps the
/// connection open: for responses no well-behaved library would produce.
final class RawHTTPPeer: Sendable {
    private let channel: any Channel
    let port: Int

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
    }

    /// Starts a peer; `answer` gets the request head as text and returns the response bytes.
    /// With `tls`, the peer speaks TLS first.
    static func start(tls: NIOSSLContext? = nil, _ answer: @escaping @Sendable (String) -> String) async throws -> RawHTTPPeer {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    if let tls { try child.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls)) }
                    try child.pipeline.syncOperations.addHandler(HeadHandler(answer: answer))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        return RawHTTPPeer(channel: channel)
    }

    func stop() async {
        try? await channel.close()
    }
}

private final class HeadHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let answer: @Sendable (String) -> String
    private var head = ""
    private var answered = false

    init(answer: @escaping @Sendable (String) -> String) {
        self.answer = answer
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !answered else { return }
        var buffer = unwrapInboundIn(data)
        head += buffer.readString(length: buffer.readableBytes) ?? ""
        guard head.contains("\r\n\r\n") else { return }
        answered = true
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(string: answer(head))), promise: nil)
    }
}
