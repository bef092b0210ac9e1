import NIOCore

/// A server's text frame as it goes on the wire: unmasked, final, encoded once.
///
/// A room event is encoded once and the same bytes are written to every member (a
/// `ByteBuffer` is shared, not copied, when written to many channels), instead of each member's
/// frame encoder allocating a header and copying the text again.
enum ServerTextFrame {
    /// The frame carrying `text`: the header (RFC 6455 section 5.2: FIN and opcode 1, no mask,
    /// the 7-, 16- or 64-bit payload length) and the UTF-8 payload, in one buffer.
    static func encode(_ text: String, allocator: ByteBufferAllocator = ByteBufferAllocator()) -> ByteBuffer {
        let length = text.utf8.count
        var buffer = allocator.buffer(capacity: length + headerSize(length))
        buffer.writeInteger(UInt8(0x81))
        switch length {
        case ..<126:
            buffer.writeInteger(UInt8(length))
        case ..<65_536:
            buffer.writeInteger(UInt8(126))
            buffer.writeInteger(UInt16(length))
        default:
            buffer.writeInteger(UInt8(127))
            buffer.writeInteger(UInt64(length))
        }
        buffer.writeString(text)
        return buffer
    }

    /// The header's size for a payload of `length` bytes.
    static func headerSize(_ length: Int) -> Int {
        switch length {
        case ..<126: 2
        case ..<65_536: 4
        default: 10
        }
    }
}
