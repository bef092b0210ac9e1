package import NIOCore
package import NIOWebSocket

/// Reads WebSocket frames (RFC 6455 section 5.2) out of the bytes a connection reads, for the
/// handler that runs ``WebSocketEngine``: no decoder in the pipeline, no message per frame
/// through it.
///
/// It refuses what swift-nio's `WebSocketFrameDecoder` refuses, with the same errors, as soon as
/// the header says so (before the payload arrives): a length over `maxFrameSize`
/// (`invalidFrameLength`), a control frame that is fragmented (`fragmentedControlFrame`) or longer
/// than 125 bytes (`multiByteControlFrameLength`). Everything else (masking, reserved bits and
/// opcodes) is the engine's to judge. A frame's payload is what was read, still masked: a slice of
/// it, or for the last frame of what was read the buffer itself, the frame's header in front.
package struct WebSocketFrameParser {
    package let maxFrameSize: Int
    /// What was read and not yet taken as frames: at most the start of one frame.
    private var buffered: ByteBuffer?

    package init(maxFrameSize: Int) {
        self.maxFrameSize = maxFrameSize
    }

    /// Bytes of a frame not yet whole are held.
    package var holdsBytes: Bool { buffered.map { $0.readableBytes > 0 } ?? false }

    /// The room reserved for what is held, in bytes: what a frame that spans reads costs while it
    /// arrives.
    package var heldCapacity: Int { buffered?.capacity ?? 0 }

    /// How far ahead of what has arrived a frame's buffer is reserved: this many times the bytes
    /// held, or the whole frame once it is within twice that.
    static let growthFactor = 8

    /// Adds bytes the connection read.
    ///
    /// A frame that spans reads is assembled in one buffer that, once the frame's header has
    /// arrived, is reserved ``growthFactor`` times what has arrived, and the whole frame once a
    /// sixteenth of it has arrived: a 1 MiB message read 64 KiB at a time is copied once, not
    /// again each time the buffer would double. The reservation follows the bytes that came, not
    /// what the header claims: a peer that announces 16 MiB and sends 100 KB holds about 1 MiB of
    /// address space (ByteBuffer rounds to a power of two), not 16 MiB.
    package mutating func append(_ bytes: ByteBuffer) {
        guard var held = buffered, held.readableBytes > 0 else {
            buffered = bytes
            return
        }
        buffered = nil
        // The start of a frame is kept, and the bytes before it dropped, so that what is held
        // never grows past one frame and what follows.
        held.discardReadBytes()
        var bytes = bytes
        let arrived = held.readableBytes + bytes.readableBytes
        if let header = try? header(in: held) {
            let ahead = Self.growthFactor * arrived
            held.reserveCapacity(max(arrived, header.frameSize <= 2 * ahead ? header.frameSize : ahead))
        }
        held.writeBuffer(&bytes)
        buffered = held
    }

    /// Drops what is held (the connection ended).
    package mutating func reset() {
        buffered = nil
    }

    /// What a frame's header says: enough to know where its payload is and how long it is.
    private struct Header {
        var first: UInt8
        var maskKey: WebSocketMaskingKey?
        /// The header's own bytes, masking key included.
        var size: Int
        var payloadLength: Int
        /// Header and payload.
        var frameSize: Int { size + payloadLength }
    }

    /// The header of the frame that starts at `bytes`' reader index, or nil until it has all
    /// arrived.
    /// - Throws: `NIOWebSocketError` for a header NIO's decoder would refuse.
    private func header(in bytes: ByteBuffer) throws -> Header? {
        let start = bytes.readerIndex
        guard let first = bytes.getInteger(at: start, as: UInt8.self), let second = bytes.getInteger(at: start + 1, as: UInt8.self) else {
            return nil
        }
        var size = 2
        let length: Int
        switch second & 0x7F {
        case 126:
            guard let word = bytes.getInteger(at: start + 2, as: UInt16.self) else { return nil }
            length = Int(word)
            size += 2
        case 127:
            guard let word = bytes.getInteger(at: start + 2, as: UInt64.self) else { return nil }
            guard word <= UInt64(maxFrameSize) else { throw NIOWebSocketError.invalidFrameLength }
            length = Int(word)
            size += 8
        case let short:
            length = Int(short)
        }
        guard length <= maxFrameSize else { throw NIOWebSocketError.invalidFrameLength }
        if first & 0x08 != 0 {
            guard first & 0x80 != 0 else { throw NIOWebSocketError.fragmentedControlFrame }
            guard length <= 125 else { throw NIOWebSocketError.multiByteControlFrameLength }
        }
        var maskKey: WebSocketMaskingKey?
        if second & 0x80 != 0 {
            guard bytes.readableBytes >= size + 4 else { return nil }
            // Read in place: `getBytes` would allocate an array for every frame.
            let offset = size
            maskKey = bytes.withUnsafeReadableBytes { WebSocketMaskingKey(UnsafeRawBufferPointer(rebasing: $0[offset..<offset + 4])) }
            size += 4
        }
        return Header(first: first, maskKey: maskKey, size: size, payloadLength: length)
    }

    /// The next whole frame, or nil until more bytes arrive.
    /// - Throws: `NIOWebSocketError` for a frame NIO's decoder would refuse.
    package mutating func next() throws -> WebSocketFrame? {
        guard var bytes = buffered else { return nil }
        defer { buffered = bytes.readableBytes > 0 ? bytes : nil }
        guard let header = try header(in: bytes), bytes.readableBytes >= header.frameSize else { return nil }
        bytes.moveReaderIndex(forwardBy: header.size)
        let payload: ByteBuffer
        if bytes.readableBytes == header.payloadLength {
            // The last frame of what was read is handed over in the buffer itself, with nothing
            // else holding it once this returns: the engine unmasks it where it is, and a reply's
            // header can go over this frame's header, in front of it (`WebSocketFrameBytes`).
            payload = bytes
            bytes.moveReaderIndex(to: bytes.writerIndex)
        } else {
            payload = bytes.readSlice(length: header.payloadLength)!
        }
        let first = header.first
        return WebSocketFrame(
            fin: first & 0x80 != 0,
            rsv1: first & 0x40 != 0,
            rsv2: first & 0x20 != 0,
            rsv3: first & 0x10 != 0,
            opcode: WebSocketOpcode(encodedWebSocketOpcode: first & 0x0F)!,
            maskKey: header.maskKey,
            data: payload
        )
    }
}

extension WebSocketEngine {
    /// The engine's answer to the next whole frame `parser` holds: nil when it holds none, or once
    /// the engine reads no more (what is held is dropped then). A frame the parser refuses is
    /// answered as ``decodingFailed(_:)`` answers it.
    package mutating func nextAction(from parser: inout WebSocketFrameParser) -> Action? {
        guard readsFrames else {
            parser.reset()
            return nil
        }
        do {
            guard let frame = try parser.next() else { return nil }
            return received(frame)
        } catch {
            parser.reset()
            return decodingFailed(error)
        }
    }
}
