import CompressNIO
import NIOCore

/// Compresses and inflates the messages of one connection that negotiated permessage-deflate
/// (RFC 7692 section 7.2). It lives on the connection's event loop. Its zlib streams are made on
/// first use, so a connection that never sends or receives a compressed message holds none.
final class PerMessageDeflateCodec {
    private let agreement: PerMessageDeflateNegotiation.Agreement
    private var compressor: ZlibCompressor?
    private var decompressor: ZlibDecompressor?

    /// What inflating can end with, besides a message.
    enum InflateError: Error {
        /// The message inflates past the limit (inflating stopped there).
        case tooLarge
        /// The bytes are not a deflate stream.
        case corrupt
    }

    init(agreement: PerMessageDeflateNegotiation.Agreement) {
        self.agreement = agreement
    }

    /// Whether a message of this many bytes is sent compressed.
    func compresses(_ byteCount: Int) -> Bool {
        byteCount >= agreement.minimumBytes
    }

    /// The compressed payload of one message, without the trailing `00 00 FF FF`.
    func compress(_ payload: ByteBuffer, allocator: ByteBufferAllocator) throws -> ByteBuffer {
        let compressor = try self.compressor ?? ZlibCompressor(
            algorithm: .deflate,
            configuration: ZlibConfiguration(windowSize: Int32(agreement.clientWindowBits), compressionLevel: -1, memoryLevel: 8)
        )
        self.compressor = compressor
        var input = payload
        var output = try input.compressStream(with: compressor, flush: .sync, allocator: allocator)
        if output.readableBytes >= 4 { output.moveWriterIndex(to: output.writerIndex - 4) }
        if agreement.clientNoContextTakeover { try compressor.reset() }
        return output
    }

    /// The inflated payload of one message, at most `maxBytes` long.
    func inflate(_ payload: ByteBuffer, maxBytes: Int, allocator: ByteBufferAllocator) throws(InflateError) -> ByteBuffer {
        do {
            let decompressor = try self.decompressor ?? ZlibDecompressor(algorithm: .deflate, windowSize: 15)
            self.decompressor = decompressor
            var input = payload
            input.writeBytes([0x00, 0x00, 0xFF, 0xFF])
            // One more byte than allowed is how a message past the limit shows.
            let output = try input.decompressStream(with: decompressor, maxSize: maxBytes + 1, allocator: allocator)
            // A final block (BFINAL) ends the stream before the tail put back above: bytes between
            // the two are not deflate. The ended stream starts afresh for the next message.
            guard input.readableBytes == 0 || input.readableBytesView.elementsEqual([0x00, 0x00, 0xFF, 0xFF]) else {
                try? decompressor.reset()
                throw InflateError.corrupt
            }
            // After a final block the stream starts afresh without the window (CompressNIO cannot
            // set one): a later message that refers back fails as corrupt (1007), where the
            // server's event-loop zlib keeps the window. Issue 26 gives both ends that inflater.
            if agreement.serverNoContextTakeover || input.readableBytes > 0 { try decompressor.reset() }
            guard output.readableBytes <= maxBytes else { throw InflateError.tooLarge }
            return output
        } catch let error as InflateError {
            throw error
        } catch let error as CompressNIOError where error == .bufferOverflow {
            throw .tooLarge
        } catch {
            throw .corrupt
        }
    }
}
