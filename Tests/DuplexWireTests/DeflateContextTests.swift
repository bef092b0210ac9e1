import DuplexWire
import NIOCore
import Testing

/// permessage-deflate's one compressor and inflater, as a client and a server each set it up.
@Suite("DeflateContext: one inflater for both ends")
struct DeflateContextTests {
    static let allocator = ByteBufferAllocator()

    /// The two ends of a connection, each seen from itself.
    static func ends(windowBits: Int = 15, takeover: Bool = true) -> (client: DeflateContext, server: DeflateContext) {
        let agreement = DeflateAgreement(sendWindowBits: windowBits, sendNoContextTakeover: !takeover, receiveWindowBits: windowBits, receiveNoContextTakeover: !takeover)
        return (DeflateContext(agreement: agreement, zlib: LoopZlib(memoryLevel: 8)), DeflateContext(agreement: agreement, zlib: LoopZlib()))
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
        #expect(throws: LoopZlib.InflateFailure.corrupt) { try garbage.inflate(ByteBuffer(bytes: [0xFF, 0xFF, 0xFF, 0x00, 0x13]), maxBytes: 1024, allocator: Self.allocator) }
    }

    @Test("messages under the threshold go uncompressed")
    func threshold() {
        var end = DeflateContext(agreement: DeflateAgreement(minimumBytes: 100), zlib: LoopZlib())
        let small = Self.allocator.buffer(string: "short")
        #expect(end.deflate(small, allocator: Self.allocator) == (small, false))
        #expect(end.deflate(Self.allocator.buffer(repeating: 0x41, count: 100), allocator: Self.allocator).compressed)
    }
}
