#if DEBUG
import DuplexWire
import NIOCore

/// permessage-deflate's one inflater (DuplexWire's `DeflateContext` over `LoopZlib`), which the
/// client (its own streams, going on across messages) and the server (the event loop's streams,
/// reset per message with the connection's windows) both use.
enum InflateFuzz {
    static let allocator = ByteBufferAllocator()

    static let target = FuzzTarget(
        name: "inflate",
        properties:
            "no crash; output never past the limit, however far the bytes would inflate; within the limit, the same bytes as an unlimited inflate, and 'too large' only when that goes past the limit (or is corrupt further on); what one end compresses the other inflates to the same bytes, message after message, for the window sizes and context takeover the agreement allows"
    ) { bytes in
        var input = FuzzInput(bytes)
        let limit = Int(input.byte()) * 64 + 1
        let options = input.byte()
        let payload = input.rest()

        // Hostile bytes, as a compressed message from a peer, against the same bytes with no limit.
        var bounded = DeflateContext(agreement: DeflateAgreement(), zlib: LoopZlib())
        var unlimited = DeflateContext(agreement: DeflateAgreement(), zlib: LoopZlib())
        let limited = Result { () throws(LoopZlib.InflateFailure) in
            try bounded.inflate(ByteBuffer(bytes: payload), maxBytes: limit, allocator: allocator)
        }
        let whole = Result { () throws(LoopZlib.InflateFailure) in
            try unlimited.inflate(ByteBuffer(bytes: payload), maxBytes: 1 << 24, allocator: allocator)
        }
        // The client's way (its own stream) reads the same bytes the same way.
        var own = DeflateContext(agreement: DeflateAgreement(), zlib: LoopZlib(), ownStreams: true)
        let ownLimited = Result { () throws(LoopZlib.InflateFailure) in
            try own.inflate(ByteBuffer(bytes: payload), maxBytes: limit, allocator: allocator)
        }
        require(ownLimited == limited, "the client's inflater and the server's disagree on \(payload.count) bytes: \(ownLimited) against \(limited)")
        switch (limited, whole) {
        case (.success(let a), .success(let b)):
            require(a.readableBytes <= limit, "inflated \(a.readableBytes) bytes past \(limit)")
            require(a == b, "the limit changed what \(payload.count) bytes inflate to")
        case (.failure(.tooLarge), .success(let b)):
            require(b.readableBytes > limit, "refused as too large, but the whole inflates to \(b.readableBytes) of \(limit) bytes")
        case (.failure(.tooLarge), .failure):
            break  // corrupt further on than the limit reaches
        case (.failure(.corrupt), .failure(.corrupt)):
            break
        case (.failure(let a), let b):
            require(false, "with the limit \(a), without it \(b)")
        case (.success(let a), .failure(let b)):
            require(false, "inflated \(a.readableBytes) bytes within the limit, refused without it: \(b)")
        }

        // Round trips, both ways, each end as the agreement makes it: windows of 9 to 15 bits,
        // with or without context takeover; three messages each way, the later ones referring back.
        let windowBits = 9 + Int(options % 7)
        let takeover = options & 0x80 == 0
        let client = DeflateAgreement(
            sendWindowBits: windowBits, sendNoContextTakeover: !takeover, receiveWindowBits: windowBits, receiveNoContextTakeover: !takeover)
        let server = DeflateAgreement(
            sendWindowBits: windowBits, sendNoContextTakeover: !takeover, receiveWindowBits: windowBits, receiveNoContextTakeover: !takeover)
        var clientEnd = DeflateContext(agreement: client, zlib: LoopZlib(memoryLevel: 8), ownStreams: true)
        var serverEnd = DeflateContext(agreement: server, zlib: LoopZlib())
        for message in [payload, payload.reversed() + payload, payload + payload] {
            let expected = ByteBuffer(bytes: message)
            let (toClient, serverCompressed) = serverEnd.deflate(expected, allocator: allocator)
            let read = serverCompressed ? try? clientEnd.inflate(toClient, maxBytes: 1 << 20, allocator: allocator) : toClient
            require(read == expected, "server to client round trip lost \(message.count) bytes (\(windowBits) bits, takeover \(takeover))")
            let (toServer, clientCompressed) = clientEnd.deflate(expected, allocator: allocator)
            let back = clientCompressed ? try? serverEnd.inflate(toServer, maxBytes: 1 << 20, allocator: allocator) : toServer
            require(back == expected, "client to server round trip lost \(message.count) bytes (\(windowBits) bits, takeover \(takeover))")
        }
    }
}
#endif
