import DuplexServer
import DuplexTesting
import Testing

/// RFC 6455 violations get their close codes, and the server goes on serving others.
@Suite("RFC 6455 violations on /echo")
struct ProtocolViolationTests {
    static let limit = 1024

    /// Opens a connection, runs `violate`, and returns the close code the server sends. Then
    /// checks that a fresh connection still echoes.
    func closeCode(after violate: @escaping @Sendable (TestWebSocket) async throws -> Void) async throws -> UInt16? {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(maxMessageBytes: Self.limit)) { server in
                let code = try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                    try await violate(socket)
                    return try await socket.receiveClose().code
                }
                try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                    try await socket.sendText("still serving")
                    #expect(try await socket.receiveText() == "still serving")
                }
                return code
            }
        }
    }

    @Test("a single frame over the size limit gets 1009")
    func oversizedFrame() async throws {
        let code = try await closeCode { socket in
            try await socket.sendBinary(Array(repeating: 7, count: Self.limit + 1))
        }
        #expect(code == 1009)
    }

    @Test("a fragmented message over the size limit gets 1009")
    func oversizedFragmentedMessage() async throws {
        let code = try await closeCode { socket in
            try await socket.sendFrame(fin: false, opcode: 0x2, payload: Array(repeating: 1, count: Self.limit / 2 + 10))
            try await socket.sendFrame(fin: true, opcode: 0x0, payload: Array(repeating: 2, count: Self.limit / 2 + 10))
        }
        #expect(code == 1009)
    }

    @Test("invalid UTF-8 in a text message gets 1007")
    func invalidUTF8() async throws {
        let code = try await closeCode { socket in
            try await socket.sendFrame(opcode: 0x1, payload: [0x68, 0x69, 0xC3, 0x28, 0xFF])
        }
        #expect(code == 1007)
    }

    @Test("an unmasked client frame gets 1002")
    func unmaskedFrame() async throws {
        let code = try await closeCode { socket in
            try await socket.sendFrame(opcode: 0x1, payload: Array("plain".utf8), masked: false)
        }
        #expect(code == 1002)
    }

    @Test("an unmasked frame sent with the handshake, before the 101, gets 1002")
    func unmaskedFrameWithTheHandshake() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let early = TestWebSocket.frame(opcode: 0x1, payload: Array("plain".utf8), masked: false)
                let code = try await TestWebSocket.with(port: server.port, path: "/echo", sentWithHandshake: early) { socket in
                    #expect(socket.status == 101)
                    return try await socket.receiveClose().code
                }
                #expect(code == 1002)
            }
        }
    }

    @Test("an unmasked frame from a chat member (served on the event loop) gets 1002, and the room goes on")
    func unmaskedChatFrame() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let code = try await TestWebSocket.with(port: server.port, path: "/chat/masks?name=alice") { socket in
                    #expect(try await socket.receiveText().contains(#""type":"welcome""#))
                    try await socket.sendFrame(
                        opcode: 0x1, payload: Array(#"{"type":"say","v":1,"clientMessageId":"1","text":"hi"}"#.utf8), masked: false)
                    return try await socket.receiveClose().code
                }
                #expect(code == 1002)
                let welcome = try await TestWebSocket.with(port: server.port, path: "/chat/masks?name=bob") { socket in
                    try await socket.receiveText()
                }
                #expect(welcome.contains(#""type":"welcome""#))
            }
        }
    }

    @Test("a reserved opcode gets 1002")
    func reservedOpcode() async throws {
        let code = try await closeCode { socket in
            try await socket.sendFrame(opcode: 0x3, payload: [1, 2, 3])
        }
        #expect(code == 1002)
    }

    @Test("reserved bits without a negotiated extension get 1002")
    func reservedBits() async throws {
        let code = try await closeCode { socket in
            try await socket.sendFrame(rsv: 0b100, opcode: 0x1, payload: Array("rsv1".utf8))
        }
        #expect(code == 1002)
    }

    @Test("a fragmented control frame gets 1002")
    func fragmentedControlFrame() async throws {
        let code = try await closeCode { socket in
            try await socket.sendFrame(fin: false, opcode: 0x9, payload: [1])
        }
        #expect(code == 1002)
    }

    @Test("a continuation frame with no message to continue gets 1002")
    func orphanContinuation() async throws {
        let code = try await closeCode { socket in
            try await socket.sendFrame(fin: true, opcode: 0x0, payload: Array("orphan".utf8))
        }
        #expect(code == 1002)
    }

    @Test("a new message inside a fragmented one gets 1002")
    func interleavedMessage() async throws {
        let code = try await closeCode { socket in
            try await socket.sendFrame(fin: false, opcode: 0x1, payload: Array("first".utf8))
            try await socket.sendFrame(fin: true, opcode: 0x1, payload: Array("second".utf8))
        }
        #expect(code == 1002)
    }
}
