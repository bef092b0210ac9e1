import DuplexSchema
import DuplexWire
import NIOCore
import NIOWebSocket
import Testing

/// RFC 6455 (and RFC 7692's RSV1), rule by rule, on the one protocol engine, no I/O. Every test
/// runs for both roles: the frames are the peer's, masked when the engine is the server.
@Suite("WebSocketEngine: RFC 6455 for both roles")
struct WebSocketEngineTests {
    static let roles: [WebSocketEngine.Role] = [.client, .server]

    /// A frame as the peer of `role` sends it: a client's masked, a server's not.
    static func frame(
        _ opcode: WebSocketOpcode, _ bytes: [UInt8], to role: WebSocketEngine.Role, fin: Bool = true, rsv1: Bool = false, rsv2: Bool = false,
        rsv3: Bool = false
    ) -> WebSocketFrame {
        var data = ByteBuffer(bytes: bytes)
        let key: WebSocketMaskingKey? = role == .server ? WebSocketMaskingKey([0x11, 0x22, 0x33, 0x44]) : nil
        if let key { data.webSocketMask(key) }
        return WebSocketFrame(fin: fin, rsv1: rsv1, rsv2: rsv2, rsv3: rsv3, opcode: opcode, maskKey: key, data: data)
    }

    static func text(_ string: String, to role: WebSocketEngine.Role, fin: Bool = true) -> WebSocketFrame {
        frame(.text, Array(string.utf8), to: role, fin: fin)
    }

    static func deliver(_ string: String) -> WebSocketEngine.Action { .deliver(.text, ByteBuffer(string: string)) }

    static func failure(_ action: WebSocketEngine.Action) -> WebSocketCloseCode? {
        if case .fail(let code, _, _) = action { return code }
        return nil
    }

    /// Feeds `frames` and returns the last action.
    static func feed(_ engine: inout WebSocketEngine, _ frames: [WebSocketFrame]) -> WebSocketEngine.Action {
        var last = WebSocketEngine.Action.none
        for frame in frames { last = engine.received(frame) }
        return last
    }

    // MARK: 5.1 masking

    @Test("5.1: a server refuses an unmasked frame, a client a masked one (1002)", arguments: roles)
    func masking(role: WebSocketEngine.Role) {
        var engine = WebSocketEngine(role: role, maxMessageBytes: 100)
        let wrong = WebSocketFrame(
            fin: true, opcode: .text, maskKey: role == .client ? WebSocketMaskingKey([1, 2, 3, 4]) : nil, data: ByteBuffer(string: "x"))
        #expect(Self.failure(engine.received(wrong)) == .protocolError)
        #expect(engine.state == .failing(sending: true) && engine.canSend, "the owner may still send its answers until it fails the connection")
        #expect(engine.received(Self.text("after", to: role)) == .none, "nothing more is read once failing")
        engine.failed()
        #expect(engine.state == .closed && !engine.canSend)
        var right = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(right.received(Self.text("héllo", to: role)) == Self.deliver("héllo"), "the mask is removed")
    }

    // MARK: 5.2 reserved bits and opcodes

    @Test("5.2: reserved bits with no extension agreed fail with 1002", arguments: roles)
    func reservedBits(role: WebSocketEngine.Role) {
        for (rsv1, rsv2, rsv3) in [(true, false, false), (false, true, false), (false, false, true)] {
            var engine = WebSocketEngine(role: role, maxMessageBytes: 100)
            #expect(Self.failure(engine.received(Self.frame(.text, [65], to: role, rsv1: rsv1, rsv2: rsv2, rsv3: rsv3))) == .protocolError)
        }
        var compressed = WebSocketEngine(role: role, maxMessageBytes: 100, compressionNegotiated: true)
        #expect(
            Self.failure(compressed.received(Self.frame(.text, [65], to: role, rsv2: true))) == .protocolError,
            "RSV2 means nothing to permessage-deflate")
    }

    @Test("5.2: reserved opcodes, data (3-7) and control (B-F), fail with 1002", arguments: roles)
    func reservedOpcodes(role: WebSocketEngine.Role) {
        for code in [0x3, 0x7, 0xB, 0xF] as [UInt8] {
            var engine = WebSocketEngine(role: role, maxMessageBytes: 100)
            #expect(
                Self.failure(engine.received(Self.frame(WebSocketOpcode(encodedWebSocketOpcode: code)!, [1], to: role))) == .protocolError,
                "opcode \(code)")
        }
    }

    // MARK: 5.4 fragmentation

    @Test("5.4: fragments are reassembled, with control frames between them", arguments: roles)
    func reassembly(role: WebSocketEngine.Role) {
        var engine = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(engine.received(Self.text("hel", to: role, fin: false)) == .none)
        #expect(engine.received(Self.frame(.ping, [7], to: role)) == .sendPong(ByteBuffer(bytes: [7])))
        #expect(engine.received(Self.frame(.continuation, Array("l".utf8), to: role, fin: false)) == .none)
        #expect(engine.received(Self.frame(.continuation, Array("o".utf8), to: role)) == Self.deliver("hello"))
        #expect(engine.received(Self.frame(.binary, [0, 255], to: role, fin: false)) == .none)
        #expect(engine.received(Self.frame(.continuation, [1], to: role)) == .deliver(.binary, ByteBuffer(bytes: [0, 255, 1])))
    }

    @Test("5.4: a continuation with nothing to continue, or a new message inside a fragmented one, fails with 1002", arguments: roles)
    func fragmentationErrors(role: WebSocketEngine.Role) {
        var orphan = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(Self.failure(orphan.received(Self.frame(.continuation, [1], to: role))) == .protocolError)
        var interleaved = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(Self.failure(Self.feed(&interleaved, [Self.text("a", to: role, fin: false), Self.text("b", to: role)])) == .protocolError)
        var binaryInText = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(Self.failure(Self.feed(&binaryInText, [Self.text("a", to: role, fin: false), Self.frame(.binary, [1], to: role)])) == .protocolError)
    }

    // MARK: 5.5 control frames

    @Test("5.5: a fragmented control frame, or one over 125 bytes, fails with 1002", arguments: roles)
    func controlFrames(role: WebSocketEngine.Role) {
        for opcode in [WebSocketOpcode.ping, .pong, .connectionClose] {
            var fragmented = WebSocketEngine(role: role, maxMessageBytes: 1000)
            #expect(Self.failure(fragmented.received(Self.frame(opcode, [1, 2], to: role, fin: false))) == .protocolError, "\(opcode)")
            var long = WebSocketEngine(role: role, maxMessageBytes: 1000)
            #expect(Self.failure(long.received(Self.frame(opcode, Array(repeating: 0x41, count: 126), to: role))) == .protocolError, "\(opcode)")
        }
        var decoder = WebSocketEngine(role: role, maxMessageBytes: 1000)
        #expect(Self.failure(decoder.decodingFailed(NIOWebSocketError.multiByteControlFrameLength)) == .protocolError, "as NIO's decoder reports it")
    }

    @Test("5.5.2, 5.5.3: a ping is answered with its payload; a pong is reported; no pong once our close went", arguments: roles)
    func pingPong(role: WebSocketEngine.Role) {
        var engine = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(engine.received(Self.frame(.ping, [1, 2, 3], to: role)) == .sendPong(ByteBuffer(bytes: [1, 2, 3])))
        #expect(
            engine.received(Self.frame(.ping, Array(repeating: 9, count: 125), to: role))
                == .sendPong(ByteBuffer(bytes: Array(repeating: 9, count: 125))))
        #expect(engine.received(Self.frame(.pong, [9], to: role)) == .pongReceived(ByteBuffer(bytes: [9])))
        _ = engine.close(code: .normalClosure, reason: "")
        #expect(engine.received(Self.frame(.ping, [1], to: role)) == .none)
    }

    // MARK: 5.5.1, 7 the close handshake

    @Test("5.5.1: the peer's close is answered with its own code; the code and reason are reported", arguments: roles)
    func peerClose(role: WebSocketEngine.Role) {
        var engine = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(
            engine.received(Self.frame(.connectionClose, [0x03, 0xE9] + Array("bye".utf8), to: role))
                == .replyToClose(code: .goingAway, reason: "bye"))
        #expect(!engine.canSend)
        #expect(engine.received(Self.text("late", to: role)) == .none, "nothing after the close")
        var empty = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(empty.received(Self.frame(.connectionClose, [], to: role)) == .replyToClose(code: nil, reason: ""), "no code: an empty close answers")
        var application = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(
            application.received(Self.frame(.connectionClose, [0x0F, 0xA0], to: role)) == .replyToClose(code: WebSocketCloseCode(4000), reason: ""))
    }

    @Test("5.5.1, 7.4: a malformed close fails: 1-byte payload or a code that may not be sent 1002, a reason not UTF-8 1007", arguments: roles)
    func malformedClose(role: WebSocketEngine.Role) {
        let cases: [([UInt8], WebSocketCloseCode)] = [
            ([0x03], .protocolError),
            ([0x03, 0xE7], .protocolError),  // 999
            ([0x03, 0xEC], .protocolError),  // 1004
            ([0x03, 0xED], .protocolError),  // 1005
            ([0x03, 0xEE], .protocolError),  // 1006
            ([0x03, 0xF7], .protocolError),  // 1015
            ([0x07, 0xD0], .protocolError),  // 2000
            ([0x13, 0x88], .protocolError),  // 5000
            ([0x03, 0xE8, 0xC3, 0x28], .invalidFramePayloadData),
        ]
        for (payload, code) in cases {
            var engine = WebSocketEngine(role: role, maxMessageBytes: 100)
            let action = engine.received(Self.frame(.connectionClose, payload, to: role))
            #expect(Self.failure(action) == code, "\(payload)")
            guard case .fail(_, _, let sendCloseFrame) = action else { continue }
            #expect(sendCloseFrame)
        }
    }

    @Test(
        "7: a close we start completes when the peer answers; messages in flight are still delivered; a second close does nothing", arguments: roles)
    func ourClose(role: WebSocketEngine.Role) {
        var engine = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(engine.close(code: .normalClosure, reason: "done") == .sendClose(.normalClosure, reason: "done"))
        #expect(engine.close(code: .goingAway, reason: "again") == .none)
        #expect(!engine.canSend && engine.state == .closeSent)
        #expect(engine.received(Self.text("in flight", to: role)) == Self.deliver("in flight"))
        #expect(engine.received(Self.frame(.connectionClose, [0x03, 0xE8], to: role)) == .closeHandshakeDone(code: .normalClosure, reason: ""))
        #expect(engine.state == .closed)
    }

    @Test("7: a violation after our close frame fails without a second close frame", arguments: roles)
    func failureAfterOurClose(role: WebSocketEngine.Role) {
        var engine = WebSocketEngine(role: role, maxMessageBytes: 100)
        _ = engine.close(code: .normalClosure, reason: "")
        #expect(
            engine.received(Self.frame(.text, [65], to: role, rsv2: true))
                == .fail(.protocolError, reason: "\(role.peer) set reserved bits with no extension agreed", sendCloseFrame: false))
        #expect(engine.received(Self.text("more", to: role)) == .none, "nothing once failed")
    }

    @Test("7: once the connection ends, nothing more is done")
    func channelClosed() {
        var engine = WebSocketEngine(role: .server, maxMessageBytes: 100)
        engine.channelClosed()
        #expect(engine.received(Self.text("x", to: .server)) == .none)
        #expect(engine.close(code: .normalClosure, reason: "") == .none)
    }

    @Test("5.5: a close reason is cut at a character boundary to fit 125 bytes")
    func closePayload() {
        let payload = WebSocketEngine.closePayload(.goingAway, reason: String(repeating: "é", count: 100), allocator: ByteBufferAllocator())
        #expect(payload.readableBytes == 2 + 122, "61 two-byte characters fit in 123 bytes")
        #expect(String(validating: payload.readableBytesView.dropFirst(2), as: UTF8.self) != nil)
        #expect(WebSocketEngine.closePayload(nil, reason: "ignored", allocator: ByteBufferAllocator()).readableBytes == 0)
    }

    // MARK: 8.1 UTF-8

    @Test("8.1: text must be UTF-8 (1007), checked as fragments arrive; a character may span fragments", arguments: roles)
    func utf8(role: WebSocketEngine.Role) {
        var split = WebSocketEngine(role: role, maxMessageBytes: 100)
        let e = Array("é".utf8)
        #expect(split.received(Self.frame(.text, [e[0]], to: role, fin: false)) == .none)
        #expect(split.received(Self.frame(.continuation, [e[1]], to: role)) == Self.deliver("é"))
        var whole = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(Self.failure(whole.received(Self.frame(.text, [0xC3, 0x28], to: role))) == .invalidFramePayloadData)
        var early = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(
            Self.failure(early.received(Self.frame(.text, [0x41, 0xED, 0xA0], to: role, fin: false))) == .invalidFramePayloadData,
            "a surrogate fails at its fragment")
        var unfinished = WebSocketEngine(role: role, maxMessageBytes: 100)
        _ = unfinished.received(Self.frame(.text, [0x41], to: role, fin: false))
        #expect(
            Self.failure(unfinished.received(Self.frame(.continuation, [0xE2, 0x82], to: role))) == .invalidFramePayloadData,
            "the message ends inside a character")
        var binary = WebSocketEngine(role: role, maxMessageBytes: 100)
        #expect(
            binary.received(Self.frame(.binary, [0xC3, 0x28], to: role)) == .deliver(.binary, ByteBuffer(bytes: [0xC3, 0x28])),
            "binary is not checked")
    }

    // MARK: 10.4 size limits

    @Test("10.4: a message over the limit fails with 1009, whole or in fragments, or as NIO's decoder reports a long frame", arguments: roles)
    func sizeLimit(role: WebSocketEngine.Role) {
        var exact = WebSocketEngine(role: role, maxMessageBytes: 4)
        #expect(exact.received(Self.frame(.binary, [1, 2, 3, 4], to: role)) == .deliver(.binary, ByteBuffer(bytes: [1, 2, 3, 4])))
        var whole = WebSocketEngine(role: role, maxMessageBytes: 4)
        #expect(Self.failure(whole.received(Self.frame(.binary, [1, 2, 3, 4, 5], to: role))) == .messageTooBig)
        var fragmented = WebSocketEngine(role: role, maxMessageBytes: 4)
        #expect(fragmented.received(Self.frame(.binary, [1, 2, 3], to: role, fin: false)) == .none)
        #expect(
            Self.failure(fragmented.received(Self.frame(.continuation, [4, 5], to: role, fin: false))) == .messageTooBig,
            "at the fragment that passes it")
        var decoded = WebSocketEngine(role: role, maxMessageBytes: 4)
        #expect(Self.failure(decoded.decodingFailed(NIOWebSocketError.invalidFrameLength)) == .messageTooBig)
    }

    // MARK: RFC 7692 permessage-deflate

    @Test("RFC 7692 6: RSV1 marks a compressed message on its first frame only; inflated messages are checked like others", arguments: roles)
    func compressed(role: WebSocketEngine.Role) {
        var engine = WebSocketEngine(role: role, maxMessageBytes: 8, compressionNegotiated: true)
        #expect(engine.received(Self.frame(.binary, Array("ab".utf8), to: role, fin: false, rsv1: true)) == .none)
        #expect(engine.received(Self.frame(.continuation, Array("cd".utf8), to: role)) == .inflate(.binary, ByteBuffer(string: "abcd")))
        #expect(engine.inflated(.text, ByteBuffer(string: "hello")) == Self.deliver("hello"))
        #expect(engine.received(Self.text("plain", to: role)) == Self.deliver("plain"), "uncompressed messages still pass")
        #expect(Self.failure(engine.received(Self.frame(.ping, [1], to: role, rsv1: true))) == .protocolError, "RSV1 on a control frame")
        var continuation = WebSocketEngine(role: role, maxMessageBytes: 8, compressionNegotiated: true)
        _ = continuation.received(Self.frame(.text, [0x41], to: role, fin: false, rsv1: true))
        #expect(
            Self.failure(continuation.received(Self.frame(.continuation, [0x41], to: role, rsv1: true))) == .protocolError, "RSV1 on a continuation")
        var invalid = WebSocketEngine(role: role, maxMessageBytes: 8, compressionNegotiated: true)
        #expect(Self.failure(invalid.inflated(.text, ByteBuffer(bytes: [0xC3, 0x28]))) == .invalidFramePayloadData, "inflated text is UTF-8 too")
        var large = WebSocketEngine(role: role, maxMessageBytes: 8, compressionNegotiated: true)
        #expect(Self.failure(large.inflated(.binary, ByteBuffer(repeating: 0, count: 9))) == .messageTooBig)
        var bomb = WebSocketEngine(role: role, maxMessageBytes: 8, compressionNegotiated: true)
        #expect(Self.failure(bomb.inflationFailed(tooLarge: true)) == .messageTooBig)
        var corrupt = WebSocketEngine(role: role, maxMessageBytes: 8, compressionNegotiated: true)
        #expect(Self.failure(corrupt.inflationFailed(tooLarge: false)) == .invalidFramePayloadData)
    }
}
