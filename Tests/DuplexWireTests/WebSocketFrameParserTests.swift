import DuplexWire
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

/// The frame parser both ends read with: the frames and refusals of swift-nio's decoder, from
/// bytes in any chunks.
@Suite("WebSocketFrameParser: NIO's decoder's frames and refusals, from any chunks")
struct WebSocketFrameParserTests {
    static let key = WebSocketMaskingKey([0x01, 0x02, 0x03, 0x04])!

    /// A stream of frames of every length form, masked and not, with reserved bits and a control
    /// frame between fragments.
    static let stream: ByteBuffer = {
        var stream = ByteBuffer()
        let frames: [(WebSocketOpcode, Int, Bool, WebSocketMaskingKey?)] = [
            (.text, 0, true, key), (.binary, 125, false, nil), (.ping, 3, true, key), (.continuation, 126, true, nil),
            (.binary, 65_535, true, key), (.binary, 65_536, true, nil), (.connectionClose, 2, true, key),
        ]
        for (opcode, count, fin, maskKey) in frames {
            let payload = ByteBuffer(bytes: (0..<count).map { UInt8(truncatingIfNeeded: $0) })
            let (first, second) = WebSocketFrameBytes.encode(
                fin: fin, rsv1: opcode == .binary, opcode: opcode, payload: payload, maskKey: maskKey, allocator: ByteBufferAllocator())
            stream.writeImmutableBuffer(first)
            if let second { stream.writeImmutableBuffer(second) }
        }
        return stream
    }()

    static func nioFrames(_ stream: ByteBuffer, maxFrameSize: Int) throws -> [WebSocketFrame] {
        let decoder = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: maxFrameSize)))
        try decoder.writeInbound(stream)
        var frames: [WebSocketFrame] = []
        while let frame = try decoder.readInbound(as: WebSocketFrame.self) { frames.append(frame) }
        return frames
    }

    @Test("frames split anywhere (chunks of 1, 7, 1,000 and 70,000 bytes) are read whole, as NIO reads them", arguments: [1, 7, 1_000, 70_000])
    func chunks(size: Int) throws {
        let expected = try Self.nioFrames(Self.stream, maxFrameSize: 1 << 20)
        #expect(expected.count == 7)
        var parser = WebSocketFrameParser(maxFrameSize: 1 << 20)
        var frames: [WebSocketFrame] = []
        var rest = Self.stream
        while let chunk = rest.readSlice(length: min(size, rest.readableBytes)), chunk.readableBytes > 0 {
            parser.append(chunk)
            while let frame = try parser.next() { frames.append(frame) }
        }
        #expect(frames == expected)
        #expect(!parser.holdsBytes)
    }

    @Test("a header that breaks a limit is refused before its payload arrives, with NIO's error")
    func refusals() throws {
        let cases: [([UInt8], NIOWebSocketError)] = [
            ([0x82, 0x7E, 0x10, 0x01], .invalidFrameLength),  // 4,097 bytes, past 4,096
            ([0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 0], .invalidFrameLength),  // a 64-bit length's top bit
            ([0x09, 0x80], .fragmentedControlFrame),  // a ping without FIN
            ([0x8A, 0xFE, 0x00, 0x7E], .multiByteControlFrameLength),  // a 126-byte pong
        ]
        for (header, error) in cases {
            var parser = WebSocketFrameParser(maxFrameSize: 4_096)
            parser.append(ByteBuffer(bytes: header))
            #expect(throws: error, "\(header)") { try parser.next() }
            #expect(throws: NIOWebSocketError.self) { try Self.nioFrames(ByteBuffer(bytes: header), maxFrameSize: 4_096) }
        }
    }

    @Test("an incomplete header or payload waits for more bytes; what was whole is not held")
    func waits() throws {
        var parser = WebSocketFrameParser(maxFrameSize: 1 << 20)
        for prefix in [[0x81], [0x81, 0xFE, 0x01], [0x81, 0x85, 1, 2, 3], [0x81, 0x05, 0x68]] as [[UInt8]] {
            parser.reset()
            parser.append(ByteBuffer(bytes: prefix))
            #expect(try parser.next() == nil)
            #expect(parser.holdsBytes)
        }
        parser.reset()
        parser.append(ByteBuffer(bytes: [0x81, 0x02, 0x68, 0x69, 0x81]))
        #expect(try parser.next()?.data == ByteBuffer(string: "hi"))
        #expect(try parser.next() == nil && parser.holdsBytes)
        parser.append(ByteBuffer(bytes: [0x00]))
        #expect(try parser.next()?.data == ByteBuffer())
        #expect(!parser.holdsBytes)
    }

    @Test(
        "a frame that spans reads reserves room for what has arrived times the growth factor, never what its header merely claims; it is still read whole"
    )
    func reservationFollowsArrivedBytes() throws {
        let claimed = 16_000_000
        var parser = WebSocketFrameParser(maxFrameSize: 16 << 20)
        var header = ByteBuffer(bytes: [0x82, 0xFF])
        header.writeInteger(UInt64(claimed))
        header.writeBytes([1, 2, 3, 4])
        parser.append(header)
        let chunk = ByteBuffer(repeating: 0x5A, count: 65_536)
        var sent = header.readableBytes
        for _ in 0..<2 {
            parser.append(chunk)
            sent += chunk.readableBytes
            #expect(try parser.next() == nil)
        }
        // Twice 64 KiB arrived: the room reserved is 8 times that (rounded up to a power of two by
        // ByteBuffer), not the 16 MB claimed.
        #expect(parser.heldCapacity >= sent)
        #expect(parser.heldCapacity <= 16 * sent, "\(parser.heldCapacity) bytes reserved for \(sent) that arrived")
        // The rest arrives; the room stays within a multiple of what came, the frame is read whole.
        while sent < claimed + 14 {
            let count = min(chunk.readableBytes, claimed + 14 - sent)
            parser.append(chunk.getSlice(at: 0, length: count)!)
            sent += count
            #expect(parser.heldCapacity <= 32 * sent)
        }
        let frame = try #require(try parser.next())
        #expect(frame.data.readableBytes == claimed)
        #expect(!parser.holdsBytes)
    }

    /// The bytes' address, to tell whether two buffers share memory.
    static func address(_ buffer: ByteBuffer) -> UInt {
        buffer.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
    }

    @Test(
        "the last frame of a read is unmasked where it was read (no copy, room in front for an echo's header); a frame whose bytes are shared is copied, and the shared bytes stay as they were"
    )
    func unmaskedInPlace() throws {
        let text = String(repeating: "in place ", count: 1_000)
        let (masked, _) = WebSocketFrameBytes.encode(
            opcode: .text, payload: ByteBuffer(string: text), maskKey: Self.key, allocator: ByteBufferAllocator())
        let header = WebSocketFrameBytes.headerSize(length: text.utf8.count, masked: true)

        // Read, and held by nothing else: unmasked in the read buffer, the header's room in front.
        var read = ByteBufferAllocator().buffer(capacity: masked.readableBytes)
        read.writeImmutableBuffer(masked)
        let readAddress = Self.address(read)
        var parser = WebSocketFrameParser(maxFrameSize: 1 << 20)
        parser.append(read)
        read = ByteBuffer()
        var engine = WebSocketEngine(role: .server, maxMessageBytes: 1 << 20)
        guard case .deliver(.text, let message)? = engine.nextAction(from: &parser) else {
            Issue.record("the message was not delivered")
            return
        }
        #expect(String(buffer: message) == text)
        #expect(Self.address(message) == readAddress + UInt(header), "unmasked where it was read")
        let (echo, rest) = WebSocketFrameBytes.encode(opcode: .text, payload: consume message, allocator: ByteBufferAllocator())
        #expect(rest == nil, "the echo is one buffer")
        #expect(
            Self.address(echo) == readAddress + UInt(header - WebSocketFrameBytes.headerSize(length: text.utf8.count, masked: false)),
            "its header went in front of the payload, over the frame's")

        // Shared (the reader keeps the bytes): copied as it is unmasked; the shared bytes are as read.
        let kept = masked
        parser.append(kept)
        guard case .deliver(.text, let copied)? = engine.nextAction(from: &parser) else {
            Issue.record("the message was not delivered")
            return
        }
        #expect(String(buffer: copied) == text)
        #expect(Self.address(copied) != Self.address(kept) + UInt(header))
        #expect(kept == masked && kept.getBytes(at: kept.readerIndex + header, length: 16) != Array(text.utf8.prefix(16)), "still masked")
    }
}
