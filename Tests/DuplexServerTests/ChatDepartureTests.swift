@testable import DuplexServer
import DuplexTesting
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

/// Members that vanish all at once, while the room tells the others: a fan-out whose writes fail
/// closes channels on the spot, and their departures must not deadlock the room (they did, when
/// a writer drained inside the room's lock on its own event loop).
@Suite("chat: mass departure")
struct ChatDepartureTests {
    /// Reads until the welcome arrives, then nothing more.
    final class WelcomeWatcher: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let welcomed: EventLoopPromise<Void>
        private let text = NIOLockedValueBox("")

        init(welcomed: EventLoopPromise<Void>) {
            self.welcomed = welcomed
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let chunk = String(buffer: unwrapInboundIn(data))
            if text.withLockedValue({ $0 += chunk; return $0.contains(#""type":"welcome""#) }) { welcomed.succeed() }
        }

        func channelInactive(context: ChannelHandlerContext) {
            welcomed.fail(ChannelError.inputClosed)
        }
    }

    /// A member joined over a raw socket that resets (RST) when closed.
    static func rawMember(port: Int, room: String, name: String) async throws -> any Channel {
        let welcomed = MultiThreadedEventLoopGroup.singleton.next().makePromise(of: Void.self)
        let channel = try await ClientBootstrap(group: welcomed.futureResult.eventLoop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(WelcomeWatcher(welcomed: welcomed)) }
            }
            .connect(host: "127.0.0.1", port: port)
            .get()
        let options = try #require(channel as? any SocketOptionProvider)
        try await options.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
        let handshake = "GET /chat/\(room)?name=\(name) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        try await channel.writeAndFlush(ByteBuffer(string: handshake))
        try await welcomed.futureResult.get()
        return channel
    }

    @Test("150 members reset at once while the room announces each departure: the room goes on (joins, says, acks)")
    func massReset() async throws {
        try await withTimeout(.seconds(60)) {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/chat/gone?name=stayer") { stayer in
                    _ = try await stayer.receiveWelcome()
                    var members: [any Channel] = []
                    for index in 0..<150 {
                        members.append(try await Self.rawMember(port: server.port, room: "gone", name: "m\(index)"))
                    }
                    // Every reset at once: the server learns of them while it tells the room.
                    for member in members { member.close(promise: nil) }
                    try await TestWebSocket.with(port: server.port, path: "/chat/gone?name=late") { late in
                        _ = try await late.receiveWelcome()
                        try await late.say("still here", id: "l1")
                        _ = try await late.receiveAck(for: "l1")
                    }
                    // The stayer gets the late member's message, after every departure.
                    while true {
                        let text = try await stayer.receiveText()
                        if text.contains("still here") { break }
                    }
                }
            }
        }
    }
}
