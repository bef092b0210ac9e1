import DuplexWire
import NIOConcurrencyHelpers
package import NIOCore
import NIOWebSocket

/// A server's text frame as it goes on the wire: unmasked, final, encoded once.
///
/// A room event is encoded once and the same bytes are written to every member (a
/// `ByteBuffer` is shared, not copied, when written to many channels), instead of each member's
/// frame encoder allocating a header and copying the text again. The header is written by
/// DuplexWire's `WebSocketFrameBytes`, as every frame's is.
package enum ServerTextFrame {
    /// The frame carrying `text`: the header (RFC 6455 section 5.2: FIN and opcode 1, no mask,
    /// the 7-, 16- or 64-bit payload length) and the UTF-8 payload, in one buffer.
    package static func encode(_ text: String, allocator: ByteBufferAllocator = ByteBufferAllocator()) -> ByteBuffer {
        let length = text.utf8.count
        var buffer = allocator.buffer(capacity: length + headerSize(length))
        WebSocketFrameBytes.writeHeader(opcode: .text, length: length, into: &buffer)
        buffer.writeString(text)
        return buffer
    }

    /// A text frame carrying `payload` as it is, with RSV1 set when it is compressed
    /// (permessage-deflate).
    package static func encode(payload: ByteBuffer, compressed: Bool, allocator: ByteBufferAllocator = ByteBufferAllocator()) -> ByteBuffer {
        let length = payload.readableBytes
        var buffer = allocator.buffer(capacity: length + headerSize(length))
        WebSocketFrameBytes.writeHeader(rsv1: compressed, opcode: .text, length: length, into: &buffer)
        buffer.writeImmutableBuffer(payload)
        return buffer
    }

    /// The payload of a frame ``encode(_:allocator:)`` made.
    package static func payload(of frame: ByteBuffer) -> ByteBuffer {
        let length = payloadLength(of: frame)
        return frame.getSlice(at: frame.readerIndex + frame.readableBytes - length, length: length) ?? ByteBuffer()
    }

    /// The payload's length in a frame ``encode(_:allocator:)`` made: its bytes after the header.
    package static func payloadLength(of frame: ByteBuffer) -> Int {
        let header: Int
        switch frame.getInteger(at: frame.readerIndex + 1, as: UInt8.self).map({ $0 & 0x7F }) ?? 0 {
        case ..<126: header = 2
        case 126: header = 4
        default: header = 10
        }
        return max(frame.readableBytes - header, 0)
    }

    /// The header's size for a payload of `length` bytes.
    package static func headerSize(_ length: Int) -> Int {
        WebSocketFrameBytes.headerSize(length: length, masked: false)
    }
}

/// A room event's compressed frame, made once by the first member's writer that needs it and
/// shared by every member that negotiated permessage-deflate with the same window.
///
/// Each message is compressed on its own (no dictionary), which any peer's inflater reads
/// whatever it holds from earlier messages, so the same bytes serve every member.
package final class DeflatedFrameCache: Sendable {
    private let made = NIOLockedValueBox<(windowBits: Int, frame: ByteBuffer?)?>(nil)

    /// A cache with no frame yet.
    package init() {}

    /// The compressed frame for `windowBits`, made with `make` the first time (nil when it
    /// could not be compressed; the caller then sends the frame uncompressed).
    package func frame(windowBits: Int, make: () -> ByteBuffer?) -> ByteBuffer? {
        if let (bits, frame) = made.withLockedValue({ $0 }), bits == windowBits { return frame }
        let frame = make()
        made.withLockedValue { made in
            if made == nil { made = (windowBits, frame) }
        }
        return frame
    }
}
