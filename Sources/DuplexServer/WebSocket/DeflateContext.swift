import NIOCore

/// What the server agreed with one client about permessage-deflate (RFC 7692 section 7.1), as
/// its own `Sec-WebSocket-Extensions` answer states it.
struct ServerDeflateAgreement: Sendable, Equatable {
    /// The window the client compresses with (`client_max_window_bits`, else 15).
    var clientWindowBits = 15
    /// Whether the client starts every message afresh (`client_no_context_takeover`).
    var clientNoContextTakeover = false
    /// The window the server compresses with (`server_max_window_bits`, else 15).
    var serverWindowBits = 15
    /// Whether the server starts every message afresh (`server_no_context_takeover`).
    var serverNoContextTakeover = false
    /// Messages smaller than this are sent uncompressed.
    var minimumBytes = 0

    /// The agreement a server's answer states; nil when the answer is not permessage-deflate.
    init?(answer: String, minimumBytes: Int) {
        var parts = answer.split(separator: ";").map { $0.trimmingBlanks }
        guard !parts.isEmpty, parts.removeFirst().lowercased() == "permessage-deflate" else { return nil }
        self.minimumBytes = minimumBytes
        for part in parts {
            let pair = part.split(separator: "=", maxSplits: 1).map { $0.trimmingBlanks }
            // The values come from the client's offer (through the answer): RFC 7692 allows 8 to
            // 15. A larger client window than asked only keeps more history; a server window
            // under 9, which zlib cannot compress with, turns the server's compression off.
            let value = pair.count == 2 ? Int(pair[1].trimmingCharacters(in: "\"")).map { min(max($0, 8), 15) } : nil
            switch pair[0].lowercased() {
            case "client_max_window_bits": clientWindowBits = value ?? 15
            case "client_no_context_takeover": clientNoContextTakeover = true
            case "server_max_window_bits": serverWindowBits = value ?? 15
            case "server_no_context_takeover": serverNoContextTakeover = true
            default: return nil
            }
        }
    }
}

/// One connection's permessage-deflate state on the event-loop path: the agreement and the
/// last window of each direction (what the peer's zlib stream remembers), nothing more. The
/// compressing is done by the event loop's shared ``LoopZlib``.
struct DeflateContext {
    let agreement: ServerDeflateAgreement
    let zlib: LoopZlib
    /// The last `2^clientWindowBits` bytes the client's compressed messages inflated to.
    private var received: ByteBuffer?
    /// The last `2^serverWindowBits` bytes of the messages the server sent compressed.
    private var sent: ByteBuffer?

    init(agreement: ServerDeflateAgreement, zlib: LoopZlib) {
        self.agreement = agreement
        self.zlib = zlib
    }

    /// Inflates a compressed message from the client, at most `maxBytes` long.
    mutating func inflate(_ payload: ByteBuffer, maxBytes: Int, allocator: ByteBufferAllocator) throws(LoopZlib.InflateFailure) -> ByteBuffer {
        let message = try zlib.inflate(payload, dictionary: agreement.clientNoContextTakeover ? nil : received, maxBytes: maxBytes, allocator: allocator)
        if !agreement.clientNoContextTakeover {
            received = Self.window(received, then: message, bits: agreement.clientWindowBits, allocator: allocator)
        }
        return message
    }

    /// The payload to send for `message`, and whether it is compressed (RSV1): messages under
    /// the threshold go as they are, as do all when the agreed window is one zlib cannot make.
    mutating func deflate(_ message: ByteBuffer, allocator: ByteBufferAllocator) -> (payload: ByteBuffer, compressed: Bool) {
        guard message.readableBytes >= agreement.minimumBytes, agreement.serverWindowBits >= 9,
            let payload = zlib.deflate(message, windowBits: agreement.serverWindowBits, dictionary: agreement.serverNoContextTakeover ? nil : sent, allocator: allocator)
        else { return (message, false) }
        if !agreement.serverNoContextTakeover {
            sent = Self.window(sent, then: message, bits: agreement.serverWindowBits, allocator: allocator)
        }
        return (payload, true)
    }

    /// The last `2^bits` bytes of `window` followed by `message`, in a buffer of their own (so
    /// that a large message is not kept alive by its window).
    static func window(_ window: ByteBuffer?, then message: ByteBuffer, bits: Int, allocator: ByteBufferAllocator) -> ByteBuffer {
        let size = 1 << bits
        var result = allocator.buffer(capacity: min(size, (window?.readableBytes ?? 0) + message.readableBytes))
        let fromMessage = min(message.readableBytes, size)
        if var window, fromMessage < size {
            let keep = min(window.readableBytes, size - fromMessage)
            window.moveReaderIndex(forwardBy: window.readableBytes - keep)
            result.writeBuffer(&window)
        }
        result.writeImmutableBuffer(message.getSlice(at: message.readerIndex + message.readableBytes - fromMessage, length: fromMessage)!)
        return result
    }
}

extension Substring {
    fileprivate var trimmingBlanks: Substring {
        trimming { $0 == " " || $0 == "\t" }
    }

    fileprivate func trimmingCharacters(in character: Character) -> Substring {
        trimming { $0 == character }
    }

    private func trimming(_ drop: (Character) -> Bool) -> Substring {
        guard let first = firstIndex(where: { !drop($0) }), let last = lastIndex(where: { !drop($0) }) else { return self[endIndex...] }
        return self[first...last]
    }
}
