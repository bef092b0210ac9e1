@testable import DuplexChat
@testable import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

/// Members that vanish all at once, while the room tells the others: a fan-out whose writes fail
/// closes channels on the spot, and their departures must not deadlock the room (they did, when
/// a writer drained inside the room's lock on its own event loop).
@Suite("chat: mass departure")
struct ChatDepartureTests {
    /// Watches for the welcome; passes everything on (the tail of the pipeline drops it).
    final class WelcomeWatcher: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let welcomed: EventLoopPromise<Void>
        private let text = NIOLockedValueBox("")

        init(welcomed: EventLoopPromise<Void>) {
            self.welcomed = welcomed
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let chunk = String(buffer: unwrapInboundIn(data))
            let found = text.withLockedValue { text -> Bool in
                guard text != "welcomed" else { return false }  // after the welcome, read and drop
                text += chunk
                guard text.contains(#""type":"welcome""#) else { return false }
                text = "welcomed"
                return true
            }
            if found { welcomed.succeed() }
            context.fireChannelRead(data)
        }

        func channelInactive(context: ChannelHandlerContext) {
            welcomed.fail(ChannelError.inputClosed)
        }
    }

    /// A member joined over a raw socket that resets (RST) when closed.
    static func rawMember(port: Int, room: String, name: String) async throws -> any Channel {
        let welcomed = MultiThreadedEventLoopGroup.singleton.next().makePromise(of: Void.self)
        let channel: any Channel
        do {
            channel = try await Self.connect(port: port, welcomed: welcomed)
        } catch {
            // No channel, no handler to complete it: a promise left pending traps as a leak
            // (found under ThreadSanitizer, where a loaded connect was cancelled by the time limit).
            welcomed.fail(error)
            throw error
        }
        let options = try #require(channel as? any SocketOptionProvider)
        try await options.setSoLinger(linger(l_onoff: 1, l_linger: 0)).get()
        let handshake =
            "GET /chat/\(room)?name=\(name) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        try await channel.writeAndFlush(ByteBuffer(string: handshake))
        try await welcomed.futureResult.get()
        return channel
    }

    static func connect(port: Int, welcomed: EventLoopPromise<Void>) async throws -> any Channel {
        try await ClientBootstrap(group: welcomed.futureResult.eventLoop)
            // A small receive buffer: a member that stops reading backs up the server soon.
            .channelOption(.socketOption(.so_rcvbuf), value: 16 * 1024)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(WelcomeWatcher(welcomed: welcomed)) }
            }
            .connect(host: "127.0.0.1", port: port)
            .get()
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

    /// Reads everything, and yields once for each `ack` frame that comes by (across chunks).
    final class AckCounter: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let acks: AsyncStream<Void>.Continuation
        private let tail = NIOLockedValueBox("")
        private static let needle = #""type":"ack""#

        init(acks: AsyncStream<Void>.Continuation) {
            self.acks = acks
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let count = tail.withLockedValue { tail -> Int in
                let text = tail + String(buffer: unwrapInboundIn(data))
                tail = String(text.suffix(Self.needle.utf8.count - 1))
                return text.components(separatedBy: Self.needle).count - 1
            }
            for _ in 0..<count { acks.yield() }
        }

        func channelInactive(context: ChannelHandlerContext) {
            acks.finish()
        }
    }

    /// One masked text frame.
    static func maskedText(_ text: String) -> ByteBuffer {
        let payload = Array(text.utf8)
        var frame = ByteBuffer(bytes: [0x81])
        if payload.count < 126 {
            frame.writeInteger(UInt8(0x80 | payload.count))
        } else {
            frame.writeInteger(UInt8(0x80 | 126))
            frame.writeInteger(UInt16(payload.count))
        }
        frame.writeBytes([0, 0, 0, 0])  // a zero mask leaves the payload as it is
        frame.writeBytes(payload)
        return frame
    }

    @Test("a member that stops reading is cut once its queue passes its bounds and leaves the room; the writer goes on")
    func slowMemberIsCut() async throws {
        try await withTimeout(.seconds(60)) {
            try await withDuplexServer(configuration: .init(closeTimeout: .seconds(1), outboundQueueBytes: 64 * 1024)) { server in
                let slow = try await Self.rawMember(port: server.port, room: "flood", name: "slow")
                try await slow.setOption(ChannelOptions.autoRead, value: false).get()
                // The writer reads (and drops) everything, and keeps at most 4 says unacknowledged,
                // so that it never falls behind itself.
                let writer = try await Self.rawMember(port: server.port, room: "flood", name: "writer")
                let (acks, continuation) = AsyncStream.makeStream(of: Void.self)
                try await writer.pipeline.addHandler(AckCounter(acks: continuation)).get()
                var acked = acks.makeAsyncIterator()
                let text = String(repeating: "x", count: 4000)
                let room = try #require((server.server.rooms as? ChatRooms)?.existing("flood"))
                // At most 40 MB: more than the socket buffers of a reader that never reads hold.
                var sent = 0
                while sent < 10_000, room.subscriberCount > 1 {
                    if sent >= 4 { _ = try #require(await acked.next(), "the writer was closed") }
                    try await writer.writeAndFlush(Self.maskedText(#"{"type":"say","v":1,"clientMessageId":"f\#(sent)","text":"\#(text)"}"#))
                    sent += 1
                }
                #expect(room.subscriberCount == 1, "only the writer is left, after \(sent) says")
                #expect(room.memberSessions.count == 1)
                try? await slow.close()
                try? await writer.close()
            }
        }
    }
}
