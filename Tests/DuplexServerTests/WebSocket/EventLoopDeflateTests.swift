import CompressNIO
@testable import DuplexServer
import DuplexSchema
import DuplexTesting
import DuplexWire
import NIOCore
import Testing

/// permessage-deflate on the event-loop `/echo` path: the event loop's zlib streams are shared,
/// and each connection keeps only its windows, which must stand in for a peer's persistent
/// stream exactly (context takeover, RFC 7692 section 7.2.1).
@Suite("event-loop permessage-deflate: shared streams, per-connection windows")
struct EventLoopDeflateTests {
    static let allocator = ByteBufferAllocator()

    /// Messages that refer back to each other: 200 random letters (within the reach of the
    /// smallest window: zlib reaches back 2^9 - 262 bytes)
    /// compress poorly on their own, and the second and later messages compress to a few bytes
    /// only when the earlier ones are in the window. Then one longer than any window.
    static let block = randomLetters(200)
    static let messages = (0..<6).map { "\(block) number \($0)" } + [randomLetters(40_000)]

    static func randomLetters(_ count: Int) -> String {
        String((0..<count).map { _ in Character(UnicodeScalar(UInt8.random(in: 0x61...0x7A))) })
    }

    @Test("a client's persistent compressor is inflated through the shared stream, message after message", arguments: [9, 12, 15])
    func inflatesContextTakeover(windowBits: Int) throws {
        let client = try ZlibCompressor(algorithm: .deflate, configuration: ZlibConfiguration(windowSize: Int32(windowBits)))
        let agreement = try #require(Self.agreement(offer: "permessage-deflate; client_max_window_bits=\(windowBits)"))
        #expect(agreement.receiveWindowBits == windowBits)
        var context = DeflateContext(agreement: agreement, zlib: LoopZlib())
        var sizes: [Int] = []
        for message in Self.messages {
            var input = ByteBuffer(string: message)
            var payload = try input.compressStream(with: client, flush: .sync, allocator: Self.allocator)
            payload.moveWriterIndex(to: payload.writerIndex - 4)  // the 00 00 FF FF a sender drops
            sizes.append(payload.readableBytes)
            let inflated = try context.inflate(payload, maxBytes: 1 << 20, allocator: Self.allocator)
            #expect(String(buffer: inflated) == message)
        }
        #expect(sizes[1] < sizes[0] / 4, "the client referred back to the first message: \(sizes)")
    }

    @Test("the shared compressor with a connection's window is read by a client's persistent inflater", arguments: [9, 12, 15])
    func deflatesContextTakeover(windowBits: Int) throws {
        let client = try ZlibDecompressor(algorithm: .deflate, windowSize: Int32(windowBits))
        let agreement = try #require(Self.agreement(offer: "permessage-deflate; server_max_window_bits=\(windowBits)"))
        var context = DeflateContext(agreement: agreement, zlib: LoopZlib())
        var sizes: [Int] = []
        for message in Self.messages {
            let (payload, compressed) = context.deflate(ByteBuffer(string: message), allocator: Self.allocator)
            #expect(compressed)
            sizes.append(payload.readableBytes)
            var input = payload
            input.writeBytes([0x00, 0x00, 0xFF, 0xFF])
            let inflated = try input.decompressStream(with: client, maxSize: 1 << 20, allocator: Self.allocator)
            #expect(String(buffer: inflated) == message)
        }
        #expect(sizes[1] < sizes[0] / 4, "the server referred back to the first message: \(sizes)")
    }

    @Test("without context takeover each message stands alone; under the threshold a message goes uncompressed")
    func noContextTakeoverAndThreshold() throws {
        let agreement = try #require(
            Self.agreement(offer: "permessage-deflate; server_no_context_takeover; client_no_context_takeover", minimumBytes: 100))
        #expect(agreement.sendNoContextTakeover && agreement.receiveNoContextTakeover)
        var context = DeflateContext(agreement: agreement, zlib: LoopZlib())
        for message in Self.messages.prefix(3) {
            let (payload, compressed) = context.deflate(ByteBuffer(string: message), allocator: Self.allocator)
            #expect(compressed)
            // A fresh inflater each time: nothing may refer to an earlier message.
            let fresh = try ZlibDecompressor(algorithm: .deflate, windowSize: 15)
            var input = payload
            input.writeBytes([0x00, 0x00, 0xFF, 0xFF])
            #expect(String(buffer: try input.decompressStream(with: fresh, maxSize: 1 << 20, allocator: Self.allocator)) == message)
        }
        let (small, compressed) = context.deflate(ByteBuffer(string: "short"), allocator: Self.allocator)
        #expect(!compressed && String(buffer: small) == "short")
    }

    @Test("inflating stops one byte past the limit, and bytes that are not deflate are corrupt")
    func bombAndGarbage() throws {
        var context = DeflateContext(agreement: try #require(Self.agreement(offer: "permessage-deflate")), zlib: LoopZlib())
        let compressor = try ZlibCompressor(algorithm: .deflate)
        var zeros = Self.allocator.buffer(repeating: 0, count: 4 << 20)
        var bomb = try zeros.compressStream(with: compressor, flush: .sync, allocator: Self.allocator)
        bomb.moveWriterIndex(to: bomb.writerIndex - 4)
        #expect(throws: LoopZlib.InflateFailure.tooLarge) { try context.inflate(bomb, maxBytes: 64 * 1024, allocator: Self.allocator) }
        #expect(throws: LoopZlib.InflateFailure.corrupt) {
            try context.inflate(ByteBuffer(bytes: [0xFF, 0xFF, 0xFF, 0x00, 0x13]), maxBytes: 1024, allocator: Self.allocator)
        }
        // The shared stream is fine afterwards.
        var fresh = DeflateContext(agreement: context.agreement, zlib: context.zlib)
        var input = ByteBuffer(string: "after the bomb")
        var payload = try input.compressStream(with: try ZlibCompressor(algorithm: .deflate), flush: .sync, allocator: Self.allocator)
        payload.moveWriterIndex(to: payload.writerIndex - 4)
        #expect(String(buffer: try fresh.inflate(payload, maxBytes: 1024, allocator: Self.allocator)) == "after the bomb")
    }

    /// Found by the `inflate` fuzz target (Tests/Fuzz/Corpus/inflate/stored): the server
    /// refused what the client's inflater read.
    @Test("a message ending in a final block (BFINAL, RFC 7692 section 7.2.3.3) inflates, and the next one refers back to it")
    func finalBlock() throws {
        var context = DeflateContext(agreement: try #require(Self.agreement(offer: "permessage-deflate")), zlib: LoopZlib())
        // A stored block with BFINAL set, holding "hello".
        let stored = ByteBuffer(bytes: [0x01, 0x05, 0x00, 0xFA, 0xFF] + Array("hello".utf8))
        #expect(String(buffer: try context.inflate(stored, maxBytes: 1024, allocator: Self.allocator)) == "hello")
        // The window carries over: one match 5 bytes back, of length 5 (zlib with "hello" as its
        // dictionary wrote these bytes), which without the window is "too far back".
        let match = ByteBuffer(bytes: [202, 0, 17, 0, 0])
        #expect(String(buffer: try context.inflate(match, maxBytes: 1024, allocator: Self.allocator)) == "hello")
        // Bytes after the final block, before the removed tail, are not deflate.
        #expect(throws: LoopZlib.InflateFailure.corrupt) {
            try context.inflate(ByteBuffer(bytes: [0x01, 0x01, 0x00, 0xFE, 0xFF, 0x41, 0x00]), maxBytes: 1024, allocator: Self.allocator)
        }
    }

    @Test("a window keeps the last 2^bits bytes, in a buffer of its own")
    func window() {
        let message = ByteBuffer(string: String(repeating: "a", count: 600) + String(repeating: "b", count: 100))
        let first = DeflateContext.window(nil, then: message, bits: 9, allocator: Self.allocator)
        #expect(first.readableBytes == 512)
        #expect(String(buffer: first) == String(repeating: "a", count: 412) + String(repeating: "b", count: 100))
        let second = DeflateContext.window(first, then: ByteBuffer(string: "cc"), bits: 9, allocator: Self.allocator)
        #expect(String(buffer: second) == String(repeating: "a", count: 410) + String(repeating: "b", count: 100) + "cc")
        #expect(first.storageCapacity <= 512 + 64, "the window does not hold the message's buffer")
    }

    @Test("over loopback: compressed echoes both ways; RSV1 on a continuation gets 1002, and a message that does not inflate 1007")
    func overLoopback() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(configuration: .init(compression: .init(minimumBytes: 16, maxWindowBits: 12, peerMaxWindowBits: 12))) {
                server in
                let offer = ["Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"]
                try await TestWebSocket.with(port: server.port, path: "/echo", extraHeaders: offer) { socket in
                    let compressor = try ZlibCompressor(algorithm: .deflate, configuration: ZlibConfiguration(windowSize: 12))
                    let inflater = try ZlibDecompressor(algorithm: .deflate, windowSize: 12)
                    for message in Self.messages {
                        var input = ByteBuffer(string: message)
                        var payload = try input.compressStream(with: compressor, flush: .sync, allocator: Self.allocator)
                        payload.moveWriterIndex(to: payload.writerIndex - 4)
                        try await socket.sendFrame(rsv: 0x4, opcode: 0x1, payload: Array(payload.readableBytesView))
                        let echo = try await socket.receiveFrame()
                        #expect(echo.rsv1, "the echo of \(message.utf8.count) bytes comes compressed")
                        var received = ByteBuffer(bytes: echo.payload + [0x00, 0x00, 0xFF, 0xFF])
                        #expect(String(buffer: try received.decompressStream(with: inflater, maxSize: 1 << 20, allocator: Self.allocator)) == message)
                    }
                    try await socket.sendText("tiny")
                    let tiny = try await socket.receiveFrame()
                    #expect(!tiny.rsv1 && tiny.text == "tiny", "under the threshold: uncompressed")
                    // GET /metrics: the compressed messages' bytes each way, on the wire and uncompressed.
                    let total = Double(Self.messages.map(\.utf8.count).reduce(0, +))
                    let scrape = try await MetricsRouteTests.scrape(server.port)
                    #expect(scrape[#"duplex_compression_bytes_total{direction="in",form="uncompressed"}"#] == total)
                    #expect(
                        scrape[#"duplex_compression_bytes_total{direction="out",form="uncompressed"}"#] == total,
                        "\"tiny\" went uncompressed: not counted")
                    #expect((scrape[#"duplex_compression_bytes_total{direction="in",form="compressed"}"#] ?? 0) > 0)
                    #expect((scrape[#"duplex_compression_bytes_total{direction="out",form="compressed"}"#] ?? 0) > 0)
                }
                try await TestWebSocket.with(port: server.port, path: "/echo", extraHeaders: offer) { socket in
                    try await socket.sendFrame(fin: false, opcode: 0x1, payload: Array("a".utf8))
                    try await socket.sendFrame(rsv: 0x4, opcode: 0x0, payload: Array("b".utf8))
                    #expect(try await socket.receiveClose().code == 1002)
                }
                try await TestWebSocket.with(port: server.port, path: "/echo", extraHeaders: offer) { socket in
                    try await socket.sendFrame(rsv: 0x4, opcode: 0x1, payload: [0xFF, 0xFF, 0xFF, 0x00, 0x13])
                    #expect(try await socket.receiveClose().code == 1007)
                }
                // Without the offer, RSV1 is a protocol error, as before.
                try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                    try await socket.sendFrame(rsv: 0x4, opcode: 0x1, payload: Array("x".utf8))
                    #expect(try await socket.receiveClose().code == 1002)
                }
            }
        }
    }

    @Test("chat members that negotiated compression get a room event compressed once, the same bytes each, and short frames plain")
    func chatSharesCompressedFrames() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                let offer = ["Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"]
                try await TestWebSocket.with(port: server.port, path: "/chat/zip?name=ann", extraHeaders: offer) { ann in
                    #expect(try await ann.receiveText().contains(#""type":"welcome""#), "a short frame comes plain")
                    try await TestWebSocket.with(port: server.port, path: "/chat/zip?name=bob", extraHeaders: offer) { bob in
                        let text = String(repeating: "a long line, long enough to compress; ", count: 20)
                        try await bob.sendText(#"{"type":"say","v":1,"clientMessageId":"m1","text":"\#(text)"}"#)
                        var payloads: [[UInt8]] = []
                        for member in [ann, bob] {
                            while true {
                                let frame = try await member.receiveFrame()
                                guard frame.rsv1 else { continue }  // presence, welcome, ack: short and plain
                                payloads.append(frame.payload)
                                // Each member's own inflater, holding whatever came before.
                                let inflater = try ZlibDecompressor(algorithm: .deflate, windowSize: 15)
                                var input = ByteBuffer(bytes: frame.payload + [0x00, 0x00, 0xFF, 0xFF])
                                let json = String(buffer: try input.decompressStream(with: inflater, maxSize: 1 << 20, allocator: Self.allocator))
                                #expect(json.contains(#""type":"message""#) && json.contains(text))
                                break
                            }
                        }
                        #expect(payloads.count == 2 && payloads[0] == payloads[1], "the same compressed bytes for both members")
                        #expect(payloads[0].count < text.utf8.count / 4)
                    }
                }
            }
        }
    }

    /// The server's agreement for a client's offer, with the server's settings at their widest.
    static func agreement(offer: String, minimumBytes: Int = 0) -> DeflateAgreement? {
        PerMessageDeflateNegotiation.answer(offers: [offer], settings: PerMessageDeflate(minimumBytes: minimumBytes))?.agreement
    }

    @Test(
        "the server's answer: the first well-formed offer is taken, windows as asked, an offer with a bad parameter declined",
        arguments: [
            ("permessage-deflate; client_max_window_bits=-5; server_max_window_bits=99", nil, nil),
            ("permessage-deflate; server_max_window_bits", nil, nil),
            ("permessage-deflate; mystery=1", nil, nil),
            ("permessage-deflate; client_no_context_takeover; client_no_context_takeover", nil, nil),
            ("x-webkit-deflate-frame", nil, nil),
            ("permessage-deflate; client_max_window_bits=\"10\"", "permessage-deflate; client_max_window_bits=10", 10),
            ("permessage-deflate; server_max_window_bits=8", "permessage-deflate; server_max_window_bits=8", 15),
            ("permessage-deflate; mystery, permessage-deflate; server_no_context_takeover", "permessage-deflate; server_no_context_takeover", 15),
            ("x-webkit-deflate-frame, permessage-deflate; client_max_window_bits", "permessage-deflate", 15),
        ] as [(String, String?, Int?)])
    func serverAnswer(offer: String, answer: String?, clientWindow: Int?) throws {
        let answered = PerMessageDeflateNegotiation.answer(offers: [offer], settings: PerMessageDeflate(minimumBytes: 0))
        #expect(answered?.answer == answer)
        #expect(answered?.agreement.receiveWindowBits == clientWindow)
        guard let agreement = answered?.agreement else { return }
        var context = DeflateContext(agreement: agreement, zlib: LoopZlib())
        let message = ByteBuffer(string: Self.messages[0])
        let (payload, compressed) = context.deflate(message, allocator: Self.allocator)
        #expect(compressed == (agreement.sendWindowBits >= 9), "no compressing with a window zlib cannot make")
        #expect(compressed || payload == message)
    }

    @Test("the server's own settings go into its answer: its window, its context takeover, the cap on the client's window")
    func serverSettings() throws {
        let settings = PerMessageDeflate(
            minimumBytes: 16, maxWindowBits: 12, noContextTakeover: true, peerNoContextTakeover: true, peerMaxWindowBits: 10)
        let answered = try #require(PerMessageDeflateNegotiation.answer(offers: ["permessage-deflate; client_max_window_bits"], settings: settings))
        #expect(
            answered.answer
                == "permessage-deflate; server_max_window_bits=12; server_no_context_takeover; client_max_window_bits=10; client_no_context_takeover")
        #expect(
            answered.agreement
                == DeflateAgreement(
                    sendWindowBits: 12, sendNoContextTakeover: true, receiveWindowBits: 10, receiveNoContextTakeover: true, minimumBytes: 16))
        let uncapped = try #require(PerMessageDeflateNegotiation.answer(offers: ["permessage-deflate"], settings: settings))
        #expect(!uncapped.answer.contains("client_max_window_bits"), "a client that did not offer client_max_window_bits cannot be capped")
        #expect(uncapped.agreement.receiveWindowBits == 15)
        // What the server answers, the client accepts, and the two agree mirror-wise.
        let offer = PerMessageDeflateNegotiation.offer(PerMessageDeflate(maxWindowBits: 11, peerMaxWindowBits: 9))
        let server = try #require(PerMessageDeflateNegotiation.answer(offers: [offer], settings: settings))
        let client = try PerMessageDeflateNegotiation.accept(server.answer, offered: PerMessageDeflate(maxWindowBits: 11, peerMaxWindowBits: 9))
        #expect(client.sendWindowBits == server.agreement.receiveWindowBits && client.receiveWindowBits == server.agreement.sendWindowBits)
        #expect(
            client.sendNoContextTakeover == server.agreement.receiveNoContextTakeover
                && client.receiveNoContextTakeover == server.agreement.sendNoContextTakeover)
    }

    @Test(
        "over loopback, hostile window offers get an answer and a working echo, never a crash",
        arguments: [
            "permessage-deflate; client_max_window_bits=-5",
            "permessage-deflate; server_max_window_bits=8",
            "permessage-deflate; client_max_window_bits=99999999999999999999999",
            "permessage-deflate; server_max_window_bits",
        ])
    func hostileOffersOverLoopback(offer: String) async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/echo", extraHeaders: ["Sec-WebSocket-Extensions: \(offer)"]) { socket in
                    #expect(socket.status == 101 || socket.status == 400, "status \(socket.status)")
                    guard socket.status == 101 else { return }
                    let text = String(repeating: "an echo long enough to be compressed ", count: 20)
                    try await socket.sendText(text)
                    let echo = try await socket.receiveFrame()
                    if echo.rsv1 {
                        var received = ByteBuffer(bytes: echo.payload + [0x00, 0x00, 0xFF, 0xFF])
                        let inflater = try ZlibDecompressor(algorithm: .deflate, windowSize: 15)
                        #expect(String(buffer: try received.decompressStream(with: inflater, maxSize: 1 << 20, allocator: Self.allocator)) == text)
                    } else {
                        #expect(echo.text == text)
                    }
                }
                // The server still serves.
                try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                    try await socket.sendText("still here")
                    #expect(try await socket.receiveText() == "still here")
                }
            }
        }
    }
}
