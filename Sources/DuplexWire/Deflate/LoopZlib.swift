import CDuplexZlib
import NIOConcurrencyHelpers
package import NIOCore

/// The zlib streams of permessage-deflate: one event loop's on the server, shared by every
/// connection served there; one connection's on the client.
///
/// A connection keeps no zlib stream of its own, only the last window of what it sent and
/// received (``DeflateContext``). Each message resets the shared stream and gives it that
/// window as its dictionary, which is what the peer's stream holds, so context takeover works
/// as RFC 7692 section 7.2 describes. A silent connection costs nothing here, and one that has
/// spoken costs at most its two windows (4 KiB each at the server's default 12 bits), instead of
/// two zlib streams of 20 KiB or more.
///
/// Used only on its event loop (hence `@unchecked Sendable`: the server's registry hands it out
/// there).
package final class LoopZlib: @unchecked Sendable {
    /// Why inflating stopped.
    package enum InflateFailure: Error, Equatable {
        /// The message inflates past the limit; inflating stopped there.
        case tooLarge
        /// The bytes are not a deflate stream, or refer back past the window.
        case corrupt
    }

    private let memoryLevel: Int32
    private var inflater: UnsafeMutablePointer<z_stream>?
    /// Compressors by window bits (a server usually has one).
    private var deflaters: [Int: UnsafeMutablePointer<z_stream>] = [:]
    /// For ``inflateContinuing(_:maxBytes:allocator:)``: the window a final block left when it
    /// ended the stream, which the next message's new stream starts from.
    private var endedWindow: [UInt8]?
    /// For ``deflateContinuing(_:windowBits:allocator:)``: a compression that failed midway
    /// left the stream with input the peer never saw; the next message starts afresh.
    private var deflaterNeedsReset = false

    /// The streams compress at `memoryLevel` (zlib's 1 to 9; 5 takes 16 KiB for the hash).
    package init(memoryLevel: Int = 5) {
        self.memoryLevel = Int32(min(max(memoryLevel, 1), 9))
    }

    deinit {
        if let inflater {
            CDuplexZlib.inflateEnd(inflater)
            inflater.deallocate()
        }
        for deflater in deflaters.values {
            CDuplexZlib.deflateEnd(deflater)
            deflater.deallocate()
        }
    }

    /// Inflates one message's payload (without the `00 00 FF FF` its sender removed), with
    /// `dictionary` as the window before it; at most `maxBytes` come out.
    package func inflate(_ payload: ByteBuffer, dictionary: ByteBuffer?, maxBytes: Int, allocator: ByteBufferAllocator) throws(InflateFailure)
        -> ByteBuffer
    {
        guard let stream = inflateStream() else { throw .corrupt }
        guard CDuplexZlib.inflateReset(stream) == Z_OK else { throw .corrupt }
        if let dictionary, dictionary.readableBytes > 0 {
            let status = dictionary.withUnsafeReadableBytes { bytes in
                CDuplexZlib.inflateSetDictionary(stream, bytes.baseAddress?.assumingMemoryBound(to: Bytef.self), uInt(bytes.count))
            }
            guard status == Z_OK else { throw .corrupt }
        }
        var output = allocator.buffer(capacity: min(maxBytes + 1, max(payload.readableBytes * 3, 256)))
        // A payload may end in a final block (BFINAL, RFC 7692 section 7.2.3.3): the stream has
        // ended, and the tail the sender removed is not put back.
        if try !Self.inflate(payload, into: &output, stream: stream, maxBytes: maxBytes) {
            try Self.inflateTail(into: &output, stream: stream, maxBytes: maxBytes)
        }
        return output
    }

    /// Inflates one message's payload on a stream that goes on from message to message (one
    /// connection's own, with context takeover): no reset and no dictionary, so a message costs
    /// only its own bytes. At most `maxBytes` come out.
    package func inflateContinuing(_ payload: ByteBuffer, maxBytes: Int, allocator: ByteBufferAllocator) throws(InflateFailure) -> ByteBuffer {
        guard let stream = inflateStream() else { throw .corrupt }
        if let window = endedWindow {
            // The last message ended its stream with a final block: this one starts a new
            // stream, which may still refer back to what came before.
            endedWindow = nil
            guard CDuplexZlib.inflateReset(stream) == Z_OK else { throw .corrupt }
            if !window.isEmpty {
                let status = window.withUnsafeBufferPointer { bytes in
                    CDuplexZlib.inflateSetDictionary(stream, bytes.baseAddress, uInt(bytes.count))
                }
                guard status == Z_OK else { throw .corrupt }
            }
        }
        var output = allocator.buffer(capacity: min(maxBytes + 1, max(payload.readableBytes * 3, 256)))
        if try Self.inflate(payload, into: &output, stream: stream, maxBytes: maxBytes) {
            var window = [UInt8](repeating: 0, count: 32768)
            var length = uInt(window.count)
            let status = window.withUnsafeMutableBufferPointer { CDuplexZlib.inflateGetDictionary(stream, $0.baseAddress, &length) }
            guard status == Z_OK else { throw .corrupt }
            endedWindow = Array(window.prefix(Int(length)))
        } else {
            try Self.inflateTail(into: &output, stream: stream, maxBytes: maxBytes)
        }
        return output
    }

    private static let syncTail = ByteBuffer(bytes: [0x00, 0x00, 0xFF, 0xFF])

    /// Puts back the `00 00 FF FF` the sender removed (the empty stored block its sync flush
    /// wrote), which must leave the stream between blocks: a message that left a block open is
    /// not what a sync flush makes (RFC 7692 section 7.2.1), and both ends refuse it alike,
    /// whether their stream goes on or starts afresh with the next message.
    private static func inflateTail(into output: inout ByteBuffer, stream: UnsafeMutablePointer<z_stream>, maxBytes: Int) throws(InflateFailure) {
        try inflate(syncTail, into: &output, stream: stream, maxBytes: maxBytes)
        // zlib's data_type has 128 set when inflate stopped at a block boundary.
        guard stream.pointee.data_type & 128 != 0 else { throw .corrupt }
    }

    /// Inflates `input` into `output`; returns whether a final block ended the stream.
    @discardableResult
    private static func inflate(_ input: ByteBuffer, into output: inout ByteBuffer, stream: UnsafeMutablePointer<z_stream>, maxBytes: Int)
        throws(InflateFailure) -> Bool
    {
        var ended = false
        let failure: InflateFailure? = withInput(input, stream: stream) {
            while true {
                if output.writableBytes == 0 {
                    // One byte past the limit is how a message too large shows.
                    guard output.readableBytes <= maxBytes else { return .tooLarge }
                    output.reserveCapacity(min(maxBytes + 1, max(output.capacity * 2, 256)))
                }
                let (status, produced) = Self.step(stream, into: &output) { CDuplexZlib.inflate($0, Z_SYNC_FLUSH) }
                if output.readableBytes > maxBytes { return .tooLarge }
                switch status {
                case Z_OK:
                    // Done when every byte was taken and the output had room to spare.
                    if stream.pointee.avail_in == 0, output.writableBytes > 0 { return nil }
                case Z_BUF_ERROR:
                    // No progress: the input is used up (or more output room is needed).
                    if stream.pointee.avail_in == 0, produced == 0, output.writableBytes > 0 { return nil }
                case Z_STREAM_END:
                    // A final block ends the stream; nothing may follow it in this message.
                    ended = true
                    return stream.pointee.avail_in == 0 ? nil : .corrupt
                default:
                    return .corrupt
                }
            }
        }
        if let failure { throw failure }
        return ended
    }

    /// Compresses one message with a `windowBits` window (9 to 15) and `dictionary` as the
    /// window before it; the result ends without the `00 00 FF FF` of the sync flush.
    package func deflate(_ payload: ByteBuffer, windowBits: Int, dictionary: ByteBuffer?, allocator: ByteBufferAllocator) -> ByteBuffer? {
        guard let stream = deflateStream(windowBits: windowBits), CDuplexZlib.deflateReset(stream) == Z_OK else { return nil }
        if let dictionary, dictionary.readableBytes > 0 {
            let status = dictionary.withUnsafeReadableBytes { bytes in
                CDuplexZlib.deflateSetDictionary(stream, bytes.baseAddress?.assumingMemoryBound(to: Bytef.self), uInt(bytes.count))
            }
            guard status == Z_OK else { return nil }
        }
        return Self.compress(payload, stream: stream, allocator: allocator)
    }

    /// Compresses one message on a stream that goes on from message to message (one
    /// connection's own, with context takeover): the history is the stream's, nothing is reset.
    package func deflateContinuing(_ payload: ByteBuffer, windowBits: Int, allocator: ByteBufferAllocator) -> ByteBuffer? {
        guard let stream = deflateStream(windowBits: windowBits) else { return nil }
        if deflaterNeedsReset {
            guard CDuplexZlib.deflateReset(stream) == Z_OK else { return nil }
            deflaterNeedsReset = false
        }
        guard let output = Self.compress(payload, stream: stream, allocator: allocator) else {
            deflaterNeedsReset = true
            return nil
        }
        return output
    }

    /// Compresses `payload` with a sync flush; the result ends without its `00 00 FF FF`.
    private static func compress(_ payload: ByteBuffer, stream: UnsafeMutablePointer<z_stream>, allocator: ByteBufferAllocator) -> ByteBuffer? {
        var output = allocator.buffer(capacity: Int(CDuplexZlib.deflateBound(stream, uLong(payload.readableBytes))) + 16)
        let done = withInput(payload, stream: stream) {
            while true {
                if output.writableBytes < 16 { output.reserveCapacity(output.capacity * 2) }
                let (status, _) = step(stream, into: &output) { CDuplexZlib.deflate($0, Z_SYNC_FLUSH) }
                guard status == Z_OK || status == Z_BUF_ERROR else { return false }
                // A sync flush is complete once the input is used up with output room to spare.
                if stream.pointee.avail_in == 0, output.writableBytes > 0 { return true }
            }
        }
        guard done, output.readableBytes >= 4, output.getBytes(at: output.writerIndex - 4, length: 4) == [0x00, 0x00, 0xFF, 0xFF] else { return nil }
        output.moveWriterIndex(to: output.writerIndex - 4)
        return output
    }

    /// Runs `body` with `input`'s bytes as the stream's input; the stream lets go of them after.
    private static func withInput<Result>(_ input: ByteBuffer, stream: UnsafeMutablePointer<z_stream>, _ body: () -> Result) -> Result {
        input.withUnsafeReadableBytes { bytes in
            stream.pointee.next_in = UnsafeMutablePointer(mutating: bytes.baseAddress?.assumingMemoryBound(to: Bytef.self))
            stream.pointee.avail_in = uInt(bytes.count)
            defer {
                stream.pointee.next_in = nil
                stream.pointee.avail_in = 0
            }
            return body()
        }
    }

    /// Runs `call` (inflate or deflate) once with `output`'s writable bytes as its room; returns
    /// zlib's status and how many bytes it wrote there.
    private static func step(
        _ stream: UnsafeMutablePointer<z_stream>, into output: inout ByteBuffer, _ call: (UnsafeMutablePointer<z_stream>) -> Int32
    ) -> (Int32, Int) {
        var status: Int32 = Z_OK
        let produced = output.writeWithUnsafeMutableBytes(minimumWritableBytes: 0) { space -> Int in
            stream.pointee.next_out = space.baseAddress?.assumingMemoryBound(to: Bytef.self)
            stream.pointee.avail_out = uInt(space.count)
            status = call(stream)
            let produced = space.count - Int(stream.pointee.avail_out)
            stream.pointee.next_out = nil
            stream.pointee.avail_out = 0
            return produced
        }
        return (status, produced)
    }

    private func inflateStream() -> UnsafeMutablePointer<z_stream>? {
        if let inflater { return inflater }
        let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        // A raw stream with the largest window takes a peer's stream of any window size.
        guard CDuplexZlib_inflateInit2(stream, -15) == Z_OK else {
            stream.deallocate()
            return nil
        }
        inflater = stream
        return stream
    }

    private func deflateStream(windowBits: Int) -> UnsafeMutablePointer<z_stream>? {
        if let stream = deflaters[windowBits] { return stream }
        let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        guard CDuplexZlib_deflateInit2(stream, Z_DEFAULT_COMPRESSION, -Int32(windowBits), memoryLevel) == Z_OK else {
            stream.deallocate()
            return nil
        }
        deflaters[windowBits] = stream
        return stream
    }
}
