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
/// opcodes) is the engine's to judge. A frame's payload is a slice of what was read, still masked.
package struct WebSocketFrameParser {
    package let maxFrameSize: Int
    /// What was read and not yet taken as frames: at most the start of one frame.
    private var buffered: ByteBuffer?

    package init(maxFrameSize: Int) {
        self.maxFrameSize = maxFrameSize
    }

    /// Bytes of a frame not yet whole are held.
    package var holdsBytes: Bool { buffered.map { $0.readableBytes > 0 } ?? false }

    /// Adds bytes the connection read.
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
        held.writeBuffer(&bytes)
        buffered = held
    }

    /// Drops what is held (the connection ended).
    package mutating func reset() {
        buffered = nil
    }

    /// The next whole frame, or nil until more bytes arrive.
    /// - Throws: `NIOWebSocketError` for a frame NIO's decoder would refuse.
    package mutating func next() throws -> WebSocketFrame? {
        guard var bytes = buffered else { return nil }
        defer { buffered = bytes.readableBytes > 0 ? bytes : nil }
        let start = bytes.readerIndex
        guard let first = bytes.getInteger(at: start, as: UInt8.self), let second = bytes.getInteger(at: start + 1, as: UInt8.self) else {
            return nil
        }
        var headerSize = 2
        let length: Int
        switch second & 0x7F {
        case 126:
            guard let word = bytes.getInteger(at: start + 2, as: UInt16.self) else { return nil }
            length = Int(word)
            headerSize += 2
        case 127:
            guard let word = bytes.getInteger(at: start + 2, as: UInt64.self) else { return nil }
            guard word <= UInt64(maxFrameSize) else { throw NIOWebSocketError.invalidFrameLength }
            length = Int(word)
            headerSize += 8
        case let short:
            length = Int(short)
        }
        guard length <= maxFrameSize else { throw NIOWebSocketError.invalidFrameLength }
        if first & 0x08 != 0 {
            guard first & 0x80 != 0 else { throw NIOWebSocketError.fragmentedControlFrame }
            guard length <= 125 else { throw NIOWebSocketError.multiByteControlFrameLength }
        }
        let masked = second & 0x80 != 0
        var maskKey: WebSocketMaskingKey?
        if masked {
            guard bytes.readableBytes >= headerSize + 4 else { return nil }
            // Read in place: `getBytes` would allocate an array for every frame.
            let offset = headerSize
            maskKey = bytes.withUnsafeReadableBytes { WebSocketMaskingKey(UnsafeRawBufferPointer(rebasing: $0[offset..<offset + 4])) }
            headerSize += 4
        }
        guard bytes.readableBytes >= headerSize + length else { return nil }
        bytes.moveReaderIndex(forwardBy: headerSize)
        let payload = bytes.readSlice(length: length)!
        return WebSocketFrame(
            fin: first & 0x80 != 0,
            rsv1: first & 0x40 != 0,
            rsv2: first & 0x20 != 0,
            rsv3: first & 0x10 != 0,
            opcode: WebSocketOpcode(encodedWebSocketOpcode: first & 0x0F)!,
            maskKey: maskKey,
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
