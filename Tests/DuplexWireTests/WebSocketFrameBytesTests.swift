import DuplexWire
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

/// Frames as bytes for both ends: what `WebSocketFrameBytes` writes is what NIO's decoder reads,
/// its masking is RFC 6455's, and it writes in place only into room no one else holds.
@Suite("WebSocketFrameBytes: frames encoded in one buffer, masked eight bytes at a time")
struct WebSocketFrameBytesTests {
    static let key = WebSocketMaskingKey([0x11, 0x22, 0x33, 0x44])!

    /// The frames NIO's decoder reads from `buffers`, written one after another.
    static func decode(_ buffers: [ByteBuffer]) throws -> [WebSocketFrame] {
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)))
        for buffer in buffers { try channel.writeInbound(buffer) }
        var frames: [WebSocketFrame] = []
        while let frame = try channel.readInbound(as: WebSocketFrame.self) { frames.append(frame) }
        _ = try channel.finish()
        return frames
    }

    static func payload(_ count: Int) -> ByteBuffer {
        ByteBuffer(bytes: (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) })
    }

    @Test("xor masks as RFC 6455 section 5.3 does, from every key offset, at every length and in place")
    func masking() {
        for count in 0..<41 {
            for offset in 0..<4 {
                let source = Self.payload(count)
                var expected = source
                expected.webSocketMask(Self.key, indexOffset: offset)
                var copied = ByteBuffer()
                copied.writeRepeatingByte(0, count: count)
                source.withUnsafeReadableBytes { from in
                    copied.withUnsafeMutableReadableBytes { to in WebSocketFrameBytes.xor(from, into: to, key: Self.key, offset: offset) }
                }
                #expect(copied == expected, "copied, \(count) bytes from offset \(offset)")
                var inPlace = source
                inPlace.withUnsafeMutableReadableBytes { bytes in
                    WebSocketFrameBytes.xor(UnsafeRawBufferPointer(bytes), into: bytes, key: Self.key, offset: offset)
                }
                #expect(inPlace == expected, "in place, \(count) bytes from offset \(offset)")
            }
        }
    }

    @Test("unmask gives the payload back with room for any header in front", arguments: [0, 5, 64, 16_384])
    func unmask(count: Int) {
        var masked = Self.payload(count)
        masked.webSocketMask(Self.key)
        let unmasked = WebSocketFrameBytes.unmask(masked, key: Self.key, allocator: ByteBufferAllocator())
        #expect(unmasked == Self.payload(count))
        #expect(unmasked.readerIndex == WebSocketFrameBytes.headroom)
    }

    @Test(
        "every length encoding (7, 16 and 64 bits), masked or not, decodes as NIO's decoder reads it",
        arguments: [0, 1, 125, 126, 4_096, 4_097, 65_535, 65_536, 70_000], [false, true]
    )
    func roundTrip(count: Int, masked: Bool) throws {
        let key = masked ? Self.key : nil
        let (first, second) = WebSocketFrameBytes.encode(
            fin: false, rsv1: true, opcode: .binary, payload: Self.payload(count), maskKey: key, allocator: ByteBufferAllocator())
        let frames = try Self.decode([first] + (second.map { [$0] } ?? []))
        #expect(frames.count == 1)
        let frame = try #require(frames.first)
        #expect(!frame.fin && frame.rsv1 && !frame.rsv2 && frame.opcode == .binary && frame.maskKey == key)
        #expect(frame.unmaskedData == Self.payload(count))
        // One buffer, unless an unmasked payload is too large to copy behind its header.
        #expect((second == nil) == (masked || count <= WebSocketFrameBytes.copyLimit))
    }

    @Test("a payload with room in front that only the frame holds gets its header there: no copy")
    func inPlace() throws {
        for key in [nil, Self.key] {
            var masked = Self.payload(64)
            masked.webSocketMask(Self.key)
            let received = WebSocketFrameBytes.unmask(masked, key: Self.key, allocator: ByteBufferAllocator())
            let (frame, second) = WebSocketFrameBytes.encode(opcode: .text, payload: consume received, maskKey: key, allocator: ByteBufferAllocator())
            #expect(second == nil)
            // The header sits in the room unmask left: the frame starts inside that buffer.
            #expect(frame.readerIndex == WebSocketFrameBytes.headroom - WebSocketFrameBytes.headerSize(length: 64, masked: key != nil))
            let decoded = try #require(try Self.decode([frame]).first)
            #expect(decoded.unmaskedData == Self.payload(64) && decoded.maskKey == key)
        }
    }

    @Test("a payload someone else still holds is never written to: the frame is a copy, and theirs is left as it was")
    func sharedIsLeftAlone() throws {
        for key in [nil, Self.key] {
            var masked = Self.payload(64)
            masked.webSocketMask(Self.key)
            let received = WebSocketFrameBytes.unmask(masked, key: Self.key, allocator: ByteBufferAllocator())
            let kept = received
            let (frame, second) = WebSocketFrameBytes.encode(opcode: .text, payload: received, maskKey: key, allocator: ByteBufferAllocator())
            #expect(second == nil && frame.readerIndex == 0)
            #expect(kept == Self.payload(64) && kept.readerIndex == WebSocketFrameBytes.headroom)
            let decoded = try #require(try Self.decode([frame]).first)
            #expect(decoded.unmaskedData == Self.payload(64))
        }
    }
}
