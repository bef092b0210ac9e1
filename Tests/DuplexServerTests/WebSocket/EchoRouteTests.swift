import DuplexServer
import DuplexTesting
import NIOHTTP1
import Testing

@Suite("GET /health and WS /echo over loopback")
struct EchoRouteTests {
    @Test("/health answers 200 with {\"status\":\"ok\"} and the room store")
    func health() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestHTTPResponse.get(port: server.port, "/health") { response in
                    let body = try await response.readBody()
                    #expect(response.status == 200)
                    #expect(body == #"{"status":"ok","store":{"kind":"memory","rooms":0},"http2":{"connections":0,"streams":0,"webSockets":0}}"#)
                }
            }
        }
    }

    @Test("/echo sends text and binary back unchanged, with the same opcode, in order")
    func echoesInOrder() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                    #expect(socket.status == 101)
                    var sent: [TestWebSocket.Frame] = []
                    for i in 0..<50 {
                        if i % 3 == 0 {
                            let bytes = (0..<(i * 7)).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) }
                            try await socket.sendBinary(bytes)
                            sent.append(.init(fin: true, opcode: 0x2, payload: bytes))
                        } else {
                            let text = "message \(i) é ✓ \(String(repeating: "x", count: i))"
                            try await socket.sendText(text)
                            sent.append(.init(fin: true, opcode: 0x1, payload: Array(text.utf8)))
                        }
                    }
                    for expected in sent {
                        #expect(try await socket.receiveFrame() == expected)
                    }
                }
            }
        }
    }

    @Test("/echo reassembles a fragmented message and echoes it whole")
    func echoesFragmentedMessage() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                    try await socket.sendFrame(fin: false, opcode: 0x1, payload: Array("hel".utf8))
                    try await socket.sendFrame(opcode: 0x9, payload: Array("p".utf8))  // a ping between fragments is allowed
                    try await socket.sendFrame(fin: true, opcode: 0x0, payload: Array("lo".utf8))
                    let pong = try await socket.receiveFrame()
                    #expect(pong.opcode == 0xA && pong.payload == Array("p".utf8))
                    #expect(try await socket.receiveText() == "hello")
                }
            }
        }
    }

    @Test("a plain GET of /echo gets 426 Upgrade Required")
    func plainGetOfWebSocketRoute() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestHTTPResponse.get(port: server.port, "/echo") { response in
                    #expect(response.status == 426)
                    #expect(response.headers["Upgrade"] == ["websocket"])
                }
            }
        }
    }

    @Test("a clean close from the client is answered with a close frame")
    func closeHandshake() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                    try await socket.sendClose(code: 1000, reason: "bye")
                    let close = try await socket.receiveClose()
                    #expect(close.code == 1000)
                    try await socket.waitForEndOfStream()
                }
            }
        }
    }

    @Test("a close with a code no endpoint may send, or a one-byte payload, is answered with 1002; a valid one with its own code")
    func badCloseCodes() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                for code: UInt16 in [999, 1005, 1006, 2999, 5000] {
                    try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                        try await socket.sendClose(code: code, reason: "")
                        #expect(try await socket.receiveClose().code == 1002, "close code \(code)")
                    }
                }
                for code: UInt16 in [1001, 1011, 3000, 4999] {
                    try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                        try await socket.sendClose(code: code, reason: "fine")
                        #expect(try await socket.receiveClose().code == code, "close code \(code) is echoed (RFC 6455 section 5.5.1)")
                    }
                }
                try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                    try await socket.sendFrame(opcode: 0x8, payload: [0x03])
                    #expect(try await socket.receiveClose().code == 1002, "a one-byte close payload")
                }
            }
        }
    }

    @Test("frames sent with the handshake, before the 101, are echoed with nothing else sent after them")
    func framesBeforeTheUpgradeAnswer() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let early = TestWebSocket.frame(opcode: 0x1, payload: Array("early".utf8)) + TestWebSocket.frame(opcode: 0x9, payload: [7])
                try await TestWebSocket.with(port: server.port, path: "/echo", sentWithHandshake: early) { socket in
                    #expect(socket.status == 101)
                    #expect(try await socket.receiveText() == "early")
                    let pong = try await socket.receiveFrame()
                    #expect(pong.opcode == 0xA && pong.payload == [7])
                }
            }
        }
    }
}
