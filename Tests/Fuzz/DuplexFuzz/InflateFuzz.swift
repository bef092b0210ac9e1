#if DEBUG
@testable import Duplex
@testable import DuplexServer
import NIOCore

/// permessage-deflate's inflate on both ends: the server's event-loop zlib (`DeflateContext`)
/// and the client's (`PerMessageDeflateCodec`, over CompressNIO).
enum InflateFuzz {
    static let allocator = ByteBufferAllocator()

    static let target = FuzzTarget(
        name: "inflate",
        properties: "no crash; output never past the limit, however far the bytes would inflate; the two inflaters agree (same bytes, or both refuse, too large against corrupt); what either end compresses, the other inflates to the same bytes, message after message"
    ) { bytes in
        var input = FuzzInput(bytes)
        let limit = Int(input.byte()) * 64 + 1
        let payload = input.rest()
        let agreement = ServerDeflateAgreement(answer: "permessage-deflate", minimumBytes: 0)!
        var server = DeflateContext(agreement: agreement, zlib: LoopZlib())
        let client = PerMessageDeflateCodec(agreement: .init(clientWindowBits: 15, clientNoContextTakeover: false, serverNoContextTakeover: false, minimumBytes: 0))

        // Hostile bytes, as a compressed message from a peer.
        let fromServer = Result { () throws(LoopZlib.InflateFailure) in try server.inflate(ByteBuffer(bytes: payload), maxBytes: limit, allocator: allocator) }
        let fromClient = Result { () throws(PerMessageDeflateCodec.InflateError) in try client.inflate(ByteBuffer(bytes: payload), maxBytes: limit, allocator: allocator) }
        switch (fromServer, fromClient) {
        case (.success(let a), .success(let b)):
            require(a.readableBytes <= limit, "the server inflated \(a.readableBytes) bytes past \(limit)")
            require(a == b, "the inflaters disagree on \(payload.count) bytes")
        case (.failure(let a), .failure(let b)):
            // Bytes that inflate past the limit and are corrupt further on are refused by both;
            // which reason comes first depends on how much each inflates at a time.
            if (a == .tooLarge) != (b == .tooLarge) {
                var unlimited = DeflateContext(agreement: agreement, zlib: LoopZlib())
                let whole = Result { () throws(LoopZlib.InflateFailure) in try unlimited.inflate(ByteBuffer(bytes: payload), maxBytes: 1 << 24, allocator: allocator) }
                guard case .failure(.corrupt) = whole else {
                    return require(false, "server \(a), client \(b), and the bytes are not corrupt past the limit")
                }
            }
        case (.success(let a), .failure(let b)):
            // zlib stops at the limit; a stream that ends in garbage after the limit is "too
            // large" to one and corrupt to the other only if they read different amounts.
            require(false, "the server inflated \(a.readableBytes) bytes, the client refused: \(b)")
        case (.failure(let a), .success(let b)):
            require(false, "the client inflated \(b.readableBytes) bytes, the server refused: \(a)")
        }

        // Round trips on fresh streams: two messages each way, the second referring back.
        var sender = DeflateContext(agreement: agreement, zlib: LoopZlib())
        let receiver = PerMessageDeflateCodec(agreement: .init(clientWindowBits: 15, clientNoContextTakeover: false, serverNoContextTakeover: false, minimumBytes: 0))
        var serverReader = DeflateContext(agreement: agreement, zlib: LoopZlib())
        for message in [payload, payload.reversed() + payload] {
            let (compressed, didCompress) = sender.deflate(ByteBuffer(bytes: message), allocator: allocator)
            let read = didCompress ? try? receiver.inflate(compressed, maxBytes: 1 << 20, allocator: allocator) : compressed
            require(read == ByteBuffer(bytes: message), "server to client round trip lost \(message.count) bytes")
            // A message the client cannot compress goes out plain (NIOWebSocketTransport), so
            // only what it compressed must inflate.
            guard let fromClient = try? receiver.compress(ByteBuffer(bytes: message), allocator: allocator) else { continue }
            let back = Result { () throws(LoopZlib.InflateFailure) in try serverReader.inflate(fromClient, maxBytes: 1 << 20, allocator: allocator) }
            require((try? back.get()) == ByteBuffer(bytes: message), "client to server round trip of \(message.count) bytes (compressed to \(Array(fromClient.readableBytesView))): \(back)")
        }
    }
}
#endif
