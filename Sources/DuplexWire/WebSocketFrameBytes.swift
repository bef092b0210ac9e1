package import NIOCore
package import NIOWebSocket

/// WebSocket frames as bytes (RFC 6455 section 5.2), for either end: a frame's header and
/// payload put into as few buffers as possible, and payloads masked or unmasked eight bytes at a
/// time.
///
/// swift-nio's `WebSocketFrameEncoder` writes a frame as two buffers (a header, then the
/// payload) unless the payload has room in front that it alone owns, and its masking goes a
/// byte at a time, copying a shared payload first. Here:
/// - a received payload is unmasked in the same pass that copies it out of the read buffer
///   (``unmask(_:key:offset:allocator:)``), into a buffer with ``headroom`` free in front, so
///   that sending it back (an echo) puts the header there: one buffer, no copy;
/// - a frame whose payload has no such room is copied behind its header when it is small
///   (at most ``copyLimit``), and written as two buffers only when it is large.
package enum WebSocketFrameBytes {
    /// The longest header: 2 bytes, a 64-bit length and a masking key.
    package static let headroom = 14

    /// Payloads up to this size are copied behind their header into one buffer when they have no
    /// room in front: one buffer for the socket costs less than a second one to track.
    package static let copyLimit = 4_096

    /// The header's size for a payload of `length` bytes, with a masking key when `masked`.
    package static func headerSize(length: Int, masked: Bool) -> Int {
        let lengthBytes =
            switch length {
            case ..<126: 2
            case ..<65_536: 4
            default: 10
            }
        return lengthBytes + (masked ? 4 : 0)
    }

    /// An empty buffer for a payload of `capacity` bytes, with ``headroom`` free in front of it:
    /// a frame of it gets its header there (``encode(fin:rsv1:opcode:payload:maskKey:allocator:)``).
    package static func payloadBuffer(capacity: Int, allocator: ByteBufferAllocator) -> ByteBuffer {
        var buffer = allocator.buffer(capacity: headroom + capacity)
        buffer.moveWriterIndex(to: headroom)
        buffer.moveReaderIndex(to: headroom)
        return buffer
    }

    /// `payload` unmasked with `key` (the key's byte `offset` first), in a new buffer with
    /// ``headroom`` bytes free in front of it.
    package static func unmask(_ payload: ByteBuffer, key: WebSocketMaskingKey, offset: Int = 0, allocator: ByteBufferAllocator) -> ByteBuffer {
        let count = payload.readableBytes
        var unmasked = payloadBuffer(capacity: count, allocator: allocator)
        payload.withUnsafeReadableBytes { source in
            _ = unmasked.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { destination in
                xor(source, into: destination, key: key, offset: offset)
                return count
            }
        }
        return unmasked
    }

    /// A frame's bytes: one buffer, or the header and then the payload when the payload is large,
    /// unmasked, and has no room of its own in front. A client's frame is masked with `maskKey`,
    /// and is always one buffer (the payload is masked as it is copied, or in place).
    package static func encode(
        fin: Bool = true,
        rsv1: Bool = false,
        opcode: WebSocketOpcode,
        payload: consuming ByteBuffer,
        maskKey: WebSocketMaskingKey? = nil,
        allocator: ByteBufferAllocator
    ) -> (ByteBuffer, ByteBuffer?) {
        let length = payload.readableBytes
        let headerSize = headerSize(length: length, masked: maskKey != nil)
        let first: UInt8 = (fin ? 0x80 : 0) | (rsv1 ? 0x40 : 0) | UInt8(webSocketOpcode: opcode)
        // In place, in the room in front of a payload only this frame holds.
        if payload.readerIndex >= headerSize {
            let prepended = payload.modifyIfUniquelyOwned { (buffer: inout ByteBuffer) -> Bool in
                if let maskKey {
                    buffer.withUnsafeMutableReadableBytes { bytes in
                        xor(UnsafeRawBufferPointer(bytes), into: bytes, key: maskKey, offset: 0)
                    }
                }
                buffer.moveReaderIndex(to: buffer.readerIndex - headerSize)
                buffer.withUnsafeMutableReadableBytes { bytes in
                    _ = writeHeader(first: first, length: length, maskKey: maskKey, into: bytes)
                }
                return true
            }
            if prepended == true { return (payload, nil) }
        }
        let together = length <= copyLimit || maskKey != nil
        var frame = allocator.buffer(capacity: headerSize + (together ? length : 0))
        writeHeader(fin: fin, rsv1: rsv1, opcode: opcode, length: length, maskKey: maskKey, into: &frame)
        guard together else { return (frame, payload) }
        if let maskKey {
            payload.withUnsafeReadableBytes { source in
                _ = frame.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { destination in
                    xor(source, into: destination, key: maskKey, offset: 0)
                    return length
                }
            }
        } else {
            frame.writeImmutableBuffer(payload)
        }
        return (frame, nil)
    }

    /// Writes a frame's header for a payload of `length` bytes at `buffer`'s writer index, for a
    /// caller that writes the payload behind it: a frame encoded once and written to many
    /// connections (a chat room's event) is one buffer whatever its size.
    package static func writeHeader(
        fin: Bool = true,
        rsv1: Bool = false,
        opcode: WebSocketOpcode,
        length: Int,
        maskKey: WebSocketMaskingKey? = nil,
        into buffer: inout ByteBuffer
    ) {
        let first: UInt8 = (fin ? 0x80 : 0) | (rsv1 ? 0x40 : 0) | UInt8(webSocketOpcode: opcode)
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: headerSize(length: length, masked: maskKey != nil)) { bytes in
            writeHeader(first: first, length: length, maskKey: maskKey, into: bytes)
        }
    }

    /// Writes the header (``headerSize(length:masked:)`` bytes, at most 14) at the start of
    /// `bytes`, in one pass over memory already there. Returns how many bytes it wrote.
    private static func writeHeader(first: UInt8, length: Int, maskKey: WebSocketMaskingKey?, into bytes: UnsafeMutableRawBufferPointer) -> Int {
        let size = headerSize(length: length, masked: maskKey != nil)
        precondition(bytes.count >= size, "no room for the frame's header")
        let mask: UInt8 = maskKey == nil ? 0 : 0x80
        bytes[0] = first
        var index: Int
        switch length {
        case ..<126:
            bytes[1] = mask | UInt8(length)
            index = 2
        case ..<65_536:
            bytes[1] = mask | 126
            bytes.storeBytes(of: UInt16(length).bigEndian, toByteOffset: 2, as: UInt16.self)
            index = 4
        default:
            bytes[1] = mask | 127
            bytes.storeBytes(of: UInt64(length).bigEndian, toByteOffset: 2, as: UInt64.self)
            index = 10
        }
        if let maskKey {
            bytes[index] = maskKey[0]
            bytes[index + 1] = maskKey[1]
            bytes[index + 2] = maskKey[2]
            bytes[index + 3] = maskKey[3]
            index += 4
        }
        return index
    }

    /// `destination[i] = source[i] ^ key[(i + offset) % 4]`, eight bytes at a time; the two may
    /// be the same memory. `destination` holds at least as many bytes as `source`.
    package static func xor(_ source: UnsafeRawBufferPointer, into destination: UnsafeMutableRawBufferPointer, key: WebSocketMaskingKey, offset: Int)
    {
        let count = source.count
        precondition(destination.count >= count, "the destination is shorter than the source")
        guard count > 0, let from = source.baseAddress, let to = destination.baseAddress else { return }
        var pattern: UInt64 = 0
        withUnsafeMutableBytes(of: &pattern) { bytes in
            for index in 0..<8 { bytes[index] = key[(index + offset) & 3] }
        }
        var index = 0
        while index + 8 <= count {
            let word = from.loadUnaligned(fromByteOffset: index, as: UInt64.self)
            to.storeBytes(of: word ^ pattern, toByteOffset: index, as: UInt64.self)
            index += 8
        }
        while index < count {
            to.storeBytes(of: from.load(fromByteOffset: index, as: UInt8.self) ^ key[(index + offset) & 3], toByteOffset: index, as: UInt8.self)
            index += 1
        }
    }
}
