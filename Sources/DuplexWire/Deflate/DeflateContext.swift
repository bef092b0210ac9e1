package import NIOCore
package import NIOWebSocket

/// One connection's permessage-deflate state, at either end, in one of two ways:
/// - **shared streams** (the server): the zlib streams are the event loop's (``LoopZlib``), reset
///   for every message and given the connection's last window of each direction (what the
///   peer's stream remembers) as the dictionary. A connection keeps only its two windows, so
///   thousands of idle connections cost little; a message costs its window's setup besides.
/// - **own streams** (the client, `ownStreams`): the connection's ``LoopZlib`` goes on from
///   message to message, as a zlib stream per direction does; nothing is copied or reset, so a
///   message costs only its own bytes.
package struct DeflateContext {
    package let agreement: DeflateAgreement
    package let zlib: LoopZlib
    /// Whether `zlib` is this connection's alone, its streams going on across messages.
    package let ownStreams: Bool
    /// Shared streams: the last `2^receiveWindowBits` bytes the peer's compressed messages
    /// inflated to.
    private var received: ByteBuffer?
    /// Shared streams: the last `2^sendWindowBits` bytes of the messages this end sent compressed.
    private var sent: ByteBuffer?

    /// `zlib` shared by many connections (reset per message), or, with `ownStreams`, this
    /// connection's alone.
    package init(agreement: DeflateAgreement, zlib: LoopZlib, ownStreams: Bool = false) {
        self.agreement = agreement
        self.zlib = zlib
        self.ownStreams = ownStreams
    }

    /// Inflates a compressed message from the peer, at most `maxBytes` long.
    package mutating func inflate(_ payload: ByteBuffer, maxBytes: Int, allocator: ByteBufferAllocator) throws(LoopZlib.InflateFailure) -> ByteBuffer
    {
        if ownStreams, !agreement.receiveNoContextTakeover {
            return try zlib.inflateContinuing(payload, maxBytes: maxBytes, allocator: allocator)
        }
        let message = try zlib.inflate(
            payload, dictionary: agreement.receiveNoContextTakeover ? nil : received, maxBytes: maxBytes, allocator: allocator)
        if !agreement.receiveNoContextTakeover {
            // At least 9 bits: zlib compresses with a 9-bit window when asked for 8.
            received = Self.window(received, then: message, bits: max(agreement.receiveWindowBits, 9), allocator: allocator)
        }
        return message
    }

    /// The payload to send for `message`, and whether it is compressed (RSV1): messages under
    /// the threshold go as they are, as do all when the agreed window is one zlib cannot make.
    package mutating func deflate(_ message: ByteBuffer, allocator: ByteBufferAllocator) -> (payload: ByteBuffer, compressed: Bool) {
        guard message.readableBytes >= agreement.minimumBytes, agreement.sendWindowBits >= 9 else { return (message, false) }
        if ownStreams, !agreement.sendNoContextTakeover {
            guard let payload = zlib.deflateContinuing(message, windowBits: agreement.sendWindowBits, allocator: allocator) else {
                return (message, false)
            }
            return (payload, true)
        }
        guard
            let payload = zlib.deflate(
                message, windowBits: agreement.sendWindowBits, dictionary: agreement.sendNoContextTakeover ? nil : sent, allocator: allocator)
        else { return (message, false) }
        if !agreement.sendNoContextTakeover {
            sent = Self.window(sent, then: message, bits: agreement.sendWindowBits, allocator: allocator)
        }
        return (payload, true)
    }

    /// The last `2^bits` bytes of `window` followed by `message`, in a buffer of their own (so
    /// that a large message is not kept alive by its window).
    package static func window(_ window: ByteBuffer?, then message: ByteBuffer, bits: Int, allocator: ByteBufferAllocator) -> ByteBuffer {
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

extension WebSocketEngine {
    /// Carries out ``Action/inflate(_:_:)`` with the connection's `deflate`: the message inflated
    /// within ``maxMessageBytes`` and checked like any other, or the failure it makes.
    package mutating func inflate(
        _ opcode: WebSocketOpcode, _ payload: ByteBuffer, with deflate: inout DeflateContext, allocator: ByteBufferAllocator
    ) -> Action {
        do {
            return inflated(opcode, try deflate.inflate(payload, maxBytes: maxMessageBytes, allocator: allocator))
        } catch {
            return inflationFailed(tooLarge: error == .tooLarge)
        }
    }
}
