@testable import DuplexHost
import DuplexSchema
import DuplexWire
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

/// The server's WebSocket handler on an embedded channel, serving `/echo`: what it answers to
/// each frame a client may send, hostile ones included, its close handshake both ways, the
/// registry's commands and its backpressure, with no socket.
@Suite("the event-loop WebSocket handler on an embedded channel")
struct WebSocketHandlerTests {
    /// A connection after the upgrade, served by `/echo`, with its registry and a count of the
    /// reads the handler passes on.
    struct Connection {
        let channel: EmbeddedChannel
        let registry: ConnectionRegistry
        let reads: ReadCounter

        init(maxMessageBytes: Int = 1 << 16, closeTimeout: Duration = .seconds(1)) throws {
            channel = EmbeddedChannel()
            registry = ConnectionRegistry(metrics: ServerMetrics())
            reads = ReadCounter()
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandler(reads)
            try pipeline.addHandler(WebSocketFrameEncoder())
            try pipeline.addHandler(
                EventLoopWebSocketHandler(
                    configuration: .init(maxMessageBytes: maxMessageBytes, closeTimeout: closeTimeout),
                    registry: registry,
                    service: EchoService.shared,
                    metrics: ServerMetrics()
                )
            )
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        }

        /// Sends `bytes` as one read batch.
        func read(_ bytes: ByteBuffer...) throws {
            for buffer in bytes { try channel.writeInbound(buffer) }
            channel.pipeline.fireChannelReadComplete()
        }

        /// The frames the server wrote since the last call.
        func frames() throws -> [WebSocketFrame] {
            try EchoWriteTests.decode(EchoWriteTests.written(channel))
        }

        /// The close frame the server wrote, as its code; nil when it wrote none.
        func closeCode() throws -> UInt16? {
            try frames().first { $0.opcode == .connectionClose }.flatMap { $0.data.getInteger(at: $0.data.readerIndex, as: UInt16.self) }
        }
    }

    /// Counts the reads the handlers above it ask for.
    final class ReadCounter: ChannelOutboundHandler, @unchecked Sendable {
        typealias OutboundIn = Any
        var count = 0
        func read(context: ChannelHandlerContext) {
            count += 1
            context.read()
        }
    }

    /// A client frame as bytes, with every bit a hostile client may set: FIN, RSV, any opcode,
    /// masked or not.
    static func frame(fin: Bool = true, rsv: UInt8 = 0, opcode: UInt8, _ payload: [UInt8], masked: Bool = true) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger((fin ? 0x80 : 0) | (rsv << 4) | opcode)
        let maskBit: UInt8 = masked ? 0x80 : 0
        if payload.count < 126 {
            buffer.writeInteger(maskBit | UInt8(payload.count))
        } else if payload.count <= 0xFFFF {
            buffer.writeInteger(maskBit | 126)
            buffer.writeInteger(UInt16(payload.count))
        } else {
            buffer.writeInteger(maskBit | 127)
            buffer.writeInteger(UInt64(payload.count))
        }
        let key: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        if masked { buffer.writeBytes(key) }
        buffer.writeBytes(payload.enumerated().map { masked ? $0.element ^ key[$0.offset % 4] : $0.element })
        return buffer
    }

    static func text(_ text: String, fin: Bool = true) -> ByteBuffer { frame(fin: fin, opcode: 0x1, Array(text.utf8)) }
    static func close(_ code: UInt16, _ reason: String = "") -> ByteBuffer {
        frame(opcode: 0x8, [UInt8(code >> 8), UInt8(code & 0xFF)] + Array(reason.utf8))
    }

    @Test("a text message in three fragments is echoed once, whole, with a ping among them answered first")
    func fragments() throws {
        let connection = try Connection()
        try connection.read(
            Self.text("hel", fin: false), Self.frame(opcode: 0x9, Array("p".utf8)), Self.frame(fin: false, opcode: 0x0, Array("lo ".utf8)),
            Self.frame(opcode: 0x0, Array("world".utf8)))
        let frames = try connection.frames()
        #expect(frames.map(\.opcode) == [.pong, .text])
        #expect(String(buffer: frames[1].data) == "hello world")
        #expect(connection.channel.isActive)
    }

    @Test("a frame split across reads, down to one byte at a time, is echoed once whole")
    func splitAcrossReads() throws {
        let connection = try Connection()
        var bytes = Self.text(String(repeating: "abc", count: 100))
        while let byte = bytes.readSlice(length: 1) { try connection.channel.writeInbound(byte) }
        connection.channel.pipeline.fireChannelReadComplete()
        let frames = try connection.frames()
        #expect(frames.count == 1)
        #expect(String(buffer: frames[0].data) == String(repeating: "abc", count: 100))
    }

    @Test("text that is not UTF-8 is closed with 1007 and TCP closed after the close frame")
    func invalidUTF8() throws {
        let connection = try Connection()
        try connection.read(Self.frame(opcode: 0x1, [0x68, 0xC3, 0x28]))
        #expect(try connection.closeCode() == 1007)
        #expect(!connection.channel.isActive, "the server closes first once its close frame is written")
    }

    @Test("a message over the limit is closed with 1009, a fragmented one too, before it is all read")
    func oversized() throws {
        let single = try Connection(maxMessageBytes: 100)
        try single.read(Self.text(String(repeating: "x", count: 101)))
        #expect(try single.closeCode() == 1009)

        let fragmented = try Connection(maxMessageBytes: 100)
        try fragmented.read(
            Self.text(String(repeating: "x", count: 60), fin: false), Self.frame(fin: false, opcode: 0x0, Array(repeating: 0x78, count: 60)))
        #expect(try fragmented.closeCode() == 1009)
    }

    @Test("an unmasked client frame is a protocol error: 1002")
    func unmasked() throws {
        let connection = try Connection()
        try connection.read(Self.frame(opcode: 0x1, Array("hi".utf8), masked: false))
        #expect(try connection.closeCode() == 1002)
    }

    @Test("a reserved opcode, data or control, is a protocol error: 1002", arguments: [UInt8(0x3), 0x7, 0xB, 0xF])
    func reservedOpcode(opcode: UInt8) throws {
        let connection = try Connection()
        try connection.read(Self.frame(opcode: opcode, []))
        #expect(try connection.closeCode() == 1002)
    }

    @Test("RSV bits without an extension that defines them are a protocol error: 1002", arguments: [UInt8(4), 2, 1])
    func reservedBits(rsv: UInt8) throws {
        let connection = try Connection()
        try connection.read(Self.frame(rsv: rsv, opcode: 0x1, Array("hi".utf8)))
        #expect(try connection.closeCode() == 1002)
    }

    @Test("a control frame over 125 bytes, or fragmented, is a protocol error: 1002")
    func badControlFrames() throws {
        let long = try Connection()
        try long.read(Self.frame(opcode: 0x9, Array(repeating: 0x61, count: 126)))
        #expect(try long.closeCode() == 1002)

        let fragmented = try Connection()
        try fragmented.read(Self.frame(fin: false, opcode: 0x9, Array("p".utf8)))
        #expect(try fragmented.closeCode() == 1002)
    }

    @Test("a continuation with no message begun, or a new message before the last ended, is a protocol error: 1002")
    func badFragmentation() throws {
        let orphan = try Connection()
        try orphan.read(Self.frame(opcode: 0x0, Array("x".utf8)))
        #expect(try orphan.closeCode() == 1002)

        let interleaved = try Connection()
        try interleaved.read(Self.text("a", fin: false), Self.text("b"))
        #expect(try interleaved.closeCode() == 1002)
    }

    @Test(
        "a close frame with a code no endpoint may send, or a one-byte payload, is answered with 1002",
        arguments: [UInt16(1005), 1006, 1015, 999, 2999])
    func badCloseCode(code: UInt16) throws {
        let connection = try Connection()
        try connection.read(Self.close(code))
        #expect(try connection.closeCode() == 1002)

        let short = try Connection()
        try short.read(Self.frame(opcode: 0x8, [0x03]))
        #expect(try short.closeCode() == 1002)
    }

    @Test("a close reason that is not UTF-8 is answered with 1007")
    func badCloseReason() throws {
        let connection = try Connection()
        try connection.read(Self.frame(opcode: 0x8, [0x03, 0xE8, 0xC3, 0x28]))
        #expect(try connection.closeCode() == 1007)
    }

    @Test("the client's close is answered with its code, TCP closed by the server; what came after it is not echoed")
    func clientClose() throws {
        let connection = try Connection()
        try connection.read(Self.text("before"), Self.close(4001, "done"), Self.text("after"))
        let frames = try connection.frames()
        #expect(frames.map(\.opcode) == [.text, .connectionClose])
        #expect(String(buffer: frames[0].data) == "before")
        #expect(frames[1].data.getInteger(at: frames[1].data.readerIndex, as: UInt16.self) == 4001)
        #expect(!connection.channel.isActive)
    }

    @Test("the registry's close sends the code and reason and waits for the client's answer, then closes TCP")
    func registryClose() throws {
        let connection = try Connection()
        #expect(connection.registry.count == 1, "registered when added")
        #expect(connection.registry.send(.close(.init(4000), "bye"), matching: { $0.route == "echo" }) == 1)
        connection.channel.embeddedEventLoop.run()
        let frames = try connection.frames()
        #expect(frames.map(\.opcode) == [.connectionClose])
        var data = frames[0].data
        #expect(data.readInteger(as: UInt16.self) == 4000)
        #expect(data.readString(length: data.readableBytes) == "bye")
        #expect(connection.channel.isActive, "waiting for the client's close")
        try connection.read(Self.text("late"), Self.close(4000))
        #expect(try connection.frames().isEmpty, "nothing echoed after the server's close")
        #expect(!connection.channel.isActive)
        #expect(connection.registry.count == 0, "unregistered once closed")
    }

    @Test("a close the client never answers ends TCP after closeTimeout, not before")
    func closeTimeout() throws {
        let connection = try Connection(closeTimeout: .seconds(5))
        connection.registry.send(.close(.init(1001), "going away"), matching: { _ in true })
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(4))
        #expect(connection.channel.isActive)
        connection.channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(!connection.channel.isActive)
        #expect(try connection.closeCode() == 1001)
    }

    @Test("the registry's drop closes TCP with no close frame")
    func registryDrop() throws {
        let connection = try Connection()
        connection.registry.send(.drop, matching: { _ in true })
        connection.channel.embeddedEventLoop.run()
        #expect(!connection.channel.isActive)
        #expect(try connection.frames().allSatisfy { $0.opcode != .connectionClose })
    }

    @Test("while the channel is not writable (the client does not read), the handler asks for no read; once it is, it does")
    func backpressure() throws {
        let connection = try Connection()
        let before = connection.reads.count
        connection.channel.isWritable = false
        connection.channel.pipeline.fireChannelWritabilityChanged()
        connection.channel.read()
        #expect(connection.reads.count == before, "no read while the client does not take what is written")
        connection.channel.isWritable = true
        connection.channel.pipeline.fireChannelWritabilityChanged()
        #expect(connection.reads.count == before + 1, "the read held back is asked for now")
        connection.channel.read()
        #expect(connection.reads.count == before + 2)
    }

    @Test("a client that shuts its side down is done: the connection closes")
    func halfClosure() throws {
        let connection = try Connection()
        connection.channel.pipeline.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        #expect(!connection.channel.isActive)
    }
}
