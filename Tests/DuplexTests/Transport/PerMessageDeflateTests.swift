@testable import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import NIOCore
import NIOWebSocket
import Testing

@Suite("permessage-deflate: negotiation, codec, and both ends over loopback")
struct PerMessageDeflateTests {
    // MARK: Negotiation

    @Test("the offer names what the settings ask")
    func offer() {
        #expect(PerMessageDeflateNegotiation.offer(PerMessageDeflate()) == "permessage-deflate; client_max_window_bits")
        #expect(
            PerMessageDeflateNegotiation.offer(PerMessageDeflate(maxWindowBits: 10, noContextTakeover: true, peerNoContextTakeover: true, peerMaxWindowBits: 11))
                == "permessage-deflate; client_max_window_bits=10; server_max_window_bits=11; client_no_context_takeover; server_no_context_takeover"
        )
    }

    @Test("an answer within the offer is accepted and sets the client's window and context takeover")
    func acceptedAnswers() throws {
        let agreed = try PerMessageDeflateNegotiation.accept(
            "permessage-deflate; client_max_window_bits=12; server_max_window_bits=\"12\"; client_no_context_takeover",
            offered: PerMessageDeflate()
        )
        #expect(agreed.clientWindowBits == 12 && agreed.clientNoContextTakeover && !agreed.serverNoContextTakeover)
        let bare = try PerMessageDeflateNegotiation.accept("PerMessage-Deflate", offered: PerMessageDeflate(maxWindowBits: 11))
        #expect(bare.clientWindowBits == 11)
    }

    @Test("answers the offer does not allow fail the handshake with unexpectedExtension", arguments: [
        "permessage-deflate, x-webkit-deflate-frame",
        "x-custom",
        "permessage-deflate; server_max_window_bits=16",
        "permessage-deflate; server_max_window_bits",
        "permessage-deflate; client_max_window_bits=8",
        "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
        "permessage-deflate; server_no_context_takeover=1",
        "permessage-deflate; mystery=1",
    ])
    func refusedAnswers(answer: String) {
        #expect(throws: WebSocketError.self) {
            _ = try PerMessageDeflateNegotiation.accept(answer, offered: PerMessageDeflate())
        }
        #expect(throws: WebSocketError.self, "a larger server window than asked") {
            _ = try PerMessageDeflateNegotiation.accept("permessage-deflate; server_max_window_bits=13", offered: PerMessageDeflate(peerMaxWindowBits: 12))
        }
        #expect(throws: WebSocketError.self, "server_no_context_takeover was asked and not given") {
            _ = try PerMessageDeflateNegotiation.accept("permessage-deflate", offered: PerMessageDeflate(peerNoContextTakeover: true))
        }
    }

    // MARK: Codec and frames

    static func agreement(minimumBytes: Int = 0) -> PerMessageDeflateNegotiation.Agreement {
        .init(clientWindowBits: 15, clientNoContextTakeover: false, serverNoContextTakeover: false, minimumBytes: minimumBytes)
    }

    @Test("compress then inflate gives the message back; a bomb stops at the limit; garbage is corrupt")
    func codec() throws {
        let allocator = ByteBufferAllocator()
        let sender = PerMessageDeflateCodec(agreement: Self.agreement())
        let receiver = PerMessageDeflateCodec(agreement: Self.agreement())
        let text = String(repeating: "duplex ", count: 2_000)
        for _ in 0..<3 {  // the context carries over between messages
            let compressed = try sender.compress(allocator.buffer(string: text), allocator: allocator)
            #expect(compressed.readableBytes < text.utf8.count / 20)
            let inflated = try receiver.inflate(compressed, maxBytes: 1 << 20, allocator: allocator)
            #expect(String(buffer: inflated) == text)
        }
        let bomb = try PerMessageDeflateCodec(agreement: Self.agreement()).compress(allocator.buffer(repeating: 0, count: 2 << 20), allocator: allocator)
        #expect(bomb.readableBytes < 5_000, "2 MiB of zeros deflate to a few KiB")
        #expect(throws: PerMessageDeflateCodec.InflateError.tooLarge) {
            _ = try PerMessageDeflateCodec(agreement: Self.agreement()).inflate(bomb, maxBytes: 64 * 1024, allocator: allocator)
        }
        let exact = try PerMessageDeflateCodec(agreement: Self.agreement()).compress(allocator.buffer(repeating: 0x79, count: 4096), allocator: allocator)
        #expect(try PerMessageDeflateCodec(agreement: Self.agreement()).inflate(exact, maxBytes: 4096, allocator: allocator).readableBytes == 4096)
        #expect(throws: PerMessageDeflateCodec.InflateError.tooLarge, "one byte past the limit") {
            _ = try PerMessageDeflateCodec(agreement: Self.agreement()).inflate(exact, maxBytes: 4095, allocator: allocator)
        }
        #expect(throws: PerMessageDeflateCodec.InflateError.corrupt) {
            _ = try PerMessageDeflateCodec(agreement: Self.agreement()).inflate(allocator.buffer(bytes: [0xFF, 0xFF, 0xFF, 0x00, 0x13]), maxBytes: 1024, allocator: allocator)
        }
    }

    @Test("RSV1 marks a compressed message only when negotiated, and only on its first frame")
    func frames() {
        let allocator = ByteBufferAllocator()
        var plain = WebSocketFrameStateMachine(maxMessageBytes: 1024)
        guard case .failConnection(.protocolError, _, _, _) = plain.received(WebSocketFrame(fin: true, rsv1: true, opcode: .text, data: allocator.buffer(string: "x"))) else {
            Issue.record("RSV1 without negotiation must fail the connection")
            return
        }
        var machine = WebSocketFrameStateMachine(maxMessageBytes: 1024, compressionNegotiated: true)
        #expect(machine.received(WebSocketFrame(fin: false, rsv1: true, opcode: .binary, data: allocator.buffer(string: "ab"))) == .none)
        #expect(machine.received(WebSocketFrame(fin: true, opcode: .continuation, data: allocator.buffer(string: "cd"))) == .inflate(opcode: .binary, buffer: allocator.buffer(string: "abcd")))
        #expect(machine.inflated(opcode: .text, buffer: allocator.buffer(string: "hello")) == .deliver(.string("hello")))
        #expect(machine.received(WebSocketFrame(fin: true, opcode: .text, data: allocator.buffer(string: "plain"))) == .deliver(.string("plain")), "uncompressed messages still pass")
        guard case .failConnection(.protocolError, _, _, _) = machine.received(WebSocketFrame(fin: true, rsv1: true, opcode: .ping, data: allocator.buffer(string: "p"))) else {
            Issue.record("RSV1 on a control frame must fail the connection")
            return
        }
        var bombed = WebSocketFrameStateMachine(maxMessageBytes: 1024, compressionNegotiated: true)
        guard case .failConnection(.messageTooBig, _, let error, true) = bombed.inflationFailed(tooLarge: true) else {
            Issue.record("a message inflating past the limit gets 1009")
            return
        }
        #expect(error.code == .messageTooBig)
    }

    // MARK: Both ends over loopback

    /// A 100 KB repetitive message through a proxy that closes after 8 KB each way: only
    /// compressed does it fit, so an echo that comes back intact proves both directions.
    static func echoThroughNarrowProxy(upstreamPort: Int, path: String, compression: PerMessageDeflate?) async throws -> (echoed: Bool, extensions: String?) {
        let proxy = try await FaultProxy.start(upstreamPort: upstreamPort)
        defer { Task { await proxy.stop() } }
        proxy.add(.closeAfter(bytes: 8_000), direction: .upstream)
        proxy.add(.closeAfter(bytes: 8_000), direction: .downstream)
        let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(proxy.port)\(path)")!, configuration: .init(maxMessageBytes: 1 << 20, compression: compression))
        let events = socket.events
        try await socket.connect()
        let extensions = socket.negotiatedExtensions
        let text = String(repeating: "all work and no play ", count: 5_000)
        try await socket.send(text)
        var echoed = false
        for await event in events {
            if case .message(let message) = event {
                echoed = message.text == text
                break
            }
            if case .disconnected = event { break }
        }
        await socket.terminate()
        return (echoed, extensions)
    }

    @Test("the client and duplex-server compress both ways; without compression the same message does not fit")
    func withDuplexServer() async throws {
        try await withTimeout(.seconds(30)) {
            try await DuplexTesting.withDuplexServer { server in
                let compressed = try await Self.echoThroughNarrowProxy(upstreamPort: server.port, path: "/echo", compression: PerMessageDeflate())
                #expect(compressed.extensions?.hasPrefix("permessage-deflate") == true)
                #expect(compressed.echoed)
                let plain = try await Self.echoThroughNarrowProxy(upstreamPort: server.port, path: "/echo", compression: nil)
                #expect(plain.extensions == nil)
                #expect(!plain.echoed, "uncompressed, 100 KB cannot pass 8 KB")
            }
            try await DuplexTesting.withDuplexServer(configuration: .init(compression: nil)) { server in
                let declined = try await Self.echoThroughNarrowProxy(upstreamPort: server.port, path: "/echo", compression: PerMessageDeflate())
                #expect(declined.extensions == nil, "a server with compression off declines the offer")
            }
        }
    }

    @Test("the server's limit holds exactly for compressed messages: 4096 bytes inflated pass, 4097 get 1009")
    func serverLimitExact() async throws {
        try await withTimeout(.seconds(30)) {
            try await DuplexTesting.withDuplexServer(configuration: .init(maxMessageBytes: 4096)) { server in
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: .init(compression: PerMessageDeflate()))
                let events = socket.events
                try await socket.connect()
                try await socket.send(String(repeating: "y", count: 4096))
                try await socket.send(String(repeating: "y", count: 4097))
                var seen: [String] = []
                for await event in events {
                    switch event {
                    case .message(let message): seen.append("echo \(message.data.count)")
                    case .disconnected(let code, _): seen.append("closed \(code?.rawValue ?? 0)")
                    default: continue
                    }
                    if seen.count == 2 { break }
                }
                #expect(seen == ["echo 4096", "closed 1009"])
                await socket.terminate()
            }
        }
    }

    @Test("context takeover and windows are negotiated with duplex-server: asked for, answered, and the echo still right")
    func contextTakeoverWithDuplexServer() async throws {
        try await withTimeout(.seconds(30)) {
            try await DuplexTesting.withDuplexServer { server in
                let settings = PerMessageDeflate(maxWindowBits: 10, noContextTakeover: true, peerNoContextTakeover: true, peerMaxWindowBits: 11)
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: .init(compression: settings))
                let messages = socket.messages
                try await socket.connect()
                let answer = try #require(socket.negotiatedExtensions)
                #expect(answer.contains("server_no_context_takeover"), "\(answer)")
                #expect(answer.contains("server_max_window_bits=11"), "\(answer)")
                #expect(answer.contains("client_max_window_bits=10"), "\(answer)")
                let texts = (0..<3).map { String(repeating: "message \($0) ", count: 200) }
                for text in texts { try await socket.send(text) }
                var echoed: [String] = []
                for await message in messages {
                    echoed.append(message.text ?? "")
                    if echoed.count == texts.count { break }
                }
                #expect(echoed == texts, "every message starts afresh both ways, and still inflates")
                await socket.terminate()
            }
        }
    }

    @Test("a compressed message that inflates past maxMessageBytes gets close 1009 from the client, memory bounded")
    func clientZipBomb() async throws {
        let allocator = ByteBufferAllocator()
        let bomb = try PerMessageDeflateCodec(agreement: Self.agreement()).compress(allocator.buffer(repeating: 0x41, count: 2 << 20), allocator: allocator)
        let peer = try await ScriptedPeer.start { _ in
            .init(
                extraHeaders: [("Sec-WebSocket-Extensions", "permessage-deflate")],
                framesOnConnect: [WebSocketFrame(fin: true, rsv1: true, opcode: .text, data: bomb)]
            )
        }
        try await withTimeout(.seconds(20)) {
            let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(peer.port)/")!, configuration: .init(maxMessageBytes: 64 * 1024, compression: PerMessageDeflate()))
            let states = socket.stateEvents
            try await socket.connect()
            let closed = try await states.first(within: .seconds(10)) { $0 == .disconnected }
            guard case .disconnected(.error(let error)) = closed else {
                Issue.record("expected an error, got \(closed)")
                return
            }
            #expect(error.code == .messageTooBig && error.closeCode == .messageTooBig, "\(error)")
            await socket.terminate()
        }
        await peer.stop()
    }

    @Test("a server that enables permessage-deflate the client did not offer fails the handshake")
    func notOffered() async throws {
        let peer = try await ScriptedPeer.start { _ in .init(extraHeaders: [("Sec-WebSocket-Extensions", "permessage-deflate")]) }
        try await withTimeout(.seconds(10)) {
            let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(peer.port)/")!)
            await #expect { try await socket.connect() } throws: { ($0 as? WebSocketError)?.code == .unexpectedExtension }
        }
        await peer.stop()
    }
}
