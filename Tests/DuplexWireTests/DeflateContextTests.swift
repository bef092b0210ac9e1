import DuplexWire
import NIOCore
import Testing

/// permessage-deflate's one compressor and inflater, as a client (its own streams, going on
/// across messages) and a server (the event loop's streams, with the connection's windows) set it
/// up.
@Suite("DeflateContext: one inflater for both ends")
struct DeflateContextTests {
    static let allocator = ByteBufferAllocator()

    /// The two ends of a connection, each seen from itself.
    static func ends(windowBits: Int = 15, takeover: Bool = true) -> (client: DeflateContext, server: DeflateContext) {
        let agreement = DeflateAgreement(
            sendWindowBits: windowBits, sendNoContextTakeover: !takeover, receiveWindowBits: windowBits, receiveNoContextTakeover: !takeover)
        return (
            DeflateContext(agreement: agreement, zlib: LoopZlib(memoryLevel: 8), ownStreams: true),
            DeflateContext(agreement: agreement, zlib: LoopZlib())
        )
    }

    @Test("what one end compresses, the other inflates, message after message, both ways", arguments: [(15, true), (9, true), (12, false)])
    func roundTrips(windowBits: Int, takeover: Bool) throws {
        var (client, server) = Self.ends(windowBits: windowBits, takeover: takeover)
        let text = String(repeating: "duplex ", count: 2_000)
        for round in 0..<3 {
            let (toServer, compressed) = client.deflate(Self.allocator.buffer(string: text), allocator: Self.allocator)
            #expect(compressed && toServer.readableBytes < text.utf8.count / 20)
            #expect(String(buffer: try server.inflate(toServer, maxBytes: 1 << 20, allocator: Self.allocator)) == text, "round \(round)")
            let (toClient, _) = server.deflate(Self.allocator.buffer(string: text + "\(round)"), allocator: Self.allocator)
            #expect(String(buffer: try client.inflate(toClient, maxBytes: 1 << 20, allocator: Self.allocator)) == text + "\(round)")
        }
    }

    @Test("with context takeover, a later message refers back and is smaller; the receiver keeps that window")
    func contextTakeover() throws {
        var (client, server) = Self.ends()
        let message = Self.allocator.buffer(string: "a message that is sent twice, word for word, between two ends")
        let first = client.deflate(message, allocator: Self.allocator).payload
        _ = try server.inflate(first, maxBytes: 1024, allocator: Self.allocator)
        let second = client.deflate(message, allocator: Self.allocator).payload
        #expect(second.readableBytes < first.readableBytes / 2)
        #expect(try server.inflate(second, maxBytes: 1024, allocator: Self.allocator) == message)
        var stranger = DeflateContext(agreement: DeflateAgreement(), zlib: LoopZlib())
        #expect(throws: LoopZlib.InflateFailure.corrupt, "without the window it cannot be read") {
            try stranger.inflate(second, maxBytes: 1024, allocator: Self.allocator)
        }
    }

    @Test("a bomb stops at the limit (too large), one byte past the limit is too large, garbage is corrupt")
    func limits() throws {
        var (client, _) = Self.ends()
        let bomb = client.deflate(Self.allocator.buffer(repeating: 0, count: 2 << 20), allocator: Self.allocator).payload
        #expect(bomb.readableBytes < 5_000, "2 MiB of zeros deflate to a few KiB")
        var reader = Self.ends().server
        #expect(throws: LoopZlib.InflateFailure.tooLarge) { try reader.inflate(bomb, maxBytes: 64 * 1024, allocator: Self.allocator) }
        var sender = Self.ends().client
        let exact = sender.deflate(Self.allocator.buffer(repeating: 0x79, count: 4096), allocator: Self.allocator).payload
        var fits = Self.ends().server
        #expect(try fits.inflate(exact, maxBytes: 4096, allocator: Self.allocator).readableBytes == 4096)
        var short = Self.ends().server
        #expect(throws: LoopZlib.InflateFailure.tooLarge) { try short.inflate(exact, maxBytes: 4095, allocator: Self.allocator) }
        var garbage = Self.ends().server
        #expect(throws: LoopZlib.InflateFailure.corrupt) {
            try garbage.inflate(ByteBuffer(bytes: [0xFF, 0xFF, 0xFF, 0x00, 0x13]), maxBytes: 1024, allocator: Self.allocator)
        }
    }

    @Test("a message ending in a final block (BFINAL) inflates on either end, and the next one refers back to it", arguments: [false, true])
    func finalBlock(ownStreams: Bool) throws {
        var context = DeflateContext(agreement: DeflateAgreement(), zlib: LoopZlib(), ownStreams: ownStreams)
        // A stored block with BFINAL set, holding "hello": it ends the sender's stream.
        let stored = ByteBuffer(bytes: [0x01, 0x05, 0x00, 0xFA, 0xFF] + Array("hello".utf8))
        #expect(String(buffer: try context.inflate(stored, maxBytes: 1024, allocator: Self.allocator)) == "hello")
        // A new stream that refers 5 bytes back, into the ended one: the window carries over.
        let match = ByteBuffer(bytes: [202, 0, 17, 0, 0])
        #expect(String(buffer: try context.inflate(match, maxBytes: 1024, allocator: Self.allocator)) == "hello")
        #expect(
            String(buffer: try context.inflate(match, maxBytes: 1024, allocator: Self.allocator)) == "hello",
            "and again, from the stream that goes on")
        // Bytes after a final block, before the removed tail, are not deflate.
        var fresh = DeflateContext(agreement: DeflateAgreement(), zlib: LoopZlib(), ownStreams: ownStreams)
        #expect(throws: LoopZlib.InflateFailure.corrupt) {
            try fresh.inflate(ByteBuffer(bytes: [0x01, 0x01, 0x00, 0xFE, 0xFF, 0x41, 0x00]), maxBytes: 1024, allocator: Self.allocator)
        }
    }

    @Test("own streams without context takeover start every message afresh, both ways")
    func ownStreamsNoContextTakeover() throws {
        var (client, server) = Self.ends(takeover: false)
        let message = Self.allocator.buffer(string: "the same words, twice over, the same words")
        let first = client.deflate(message, allocator: Self.allocator).payload
        let second = client.deflate(message, allocator: Self.allocator).payload
        #expect(first == second, "nothing of the first message is referred to")
        var stranger = DeflateContext(agreement: DeflateAgreement(), zlib: LoopZlib())
        #expect(try stranger.inflate(second, maxBytes: 1024, allocator: Self.allocator) == message, "a fresh inflater reads it")
        #expect(try server.inflate(first, maxBytes: 1024, allocator: Self.allocator) == message)
    }

    @Test("messages under the threshold go uncompressed")
    func threshold() {
        var end = DeflateContext(agreement: DeflateAgreement(minimumBytes: 100), zlib: LoopZlib())
        let small = Self.allocator.buffer(string: "short")
        #expect(end.deflate(small, allocator: Self.allocator) == (small, false))
        #expect(end.deflate(Self.allocator.buffer(repeating: 0x41, count: 100), allocator: Self.allocator).compressed)
    }
}
