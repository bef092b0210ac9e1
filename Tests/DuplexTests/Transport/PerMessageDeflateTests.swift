@testable import Duplex
import DuplexSchema
import DuplexWire
import DuplexServer
import DuplexTesting
import Foundation
import NIOCore
import NIOWebSocket
import Testing
import TestSupport

@Suite("permessage-deflate: the client's negotiation, and both ends over loopback")
struct PerMessageDeflateTests {
    // MARK: Negotiation

    @Test("the offer names what the settings ask")
    func offer() {
        #expect(PerMessageDeflateNegotiation.offer(PerMessageDeflate()) == "permessage-deflate; client_max_window_bits")
        #expect(
            PerMessageDeflateNegotiation.offer(
                PerMessageDeflate(maxWindowBits: 10, noContextTakeover: true, peerNoContextTakeover: true, peerMaxWindowBits: 11))
                == "permessage-deflate; client_max_window_bits=10; server_max_window_bits=11; client_no_context_takeover; server_no_context_takeover"
        )
    }

    @Test("an answer within the offer is accepted and sets the client's window and context takeover")
    func acceptedAnswers() throws {
        let agreed = try PerMessageDeflateNegotiation.accept(
            "permessage-deflate; client_max_window_bits=12; server_max_window_bits=\"12\"; client_no_context_takeover",
            offered: PerMessageDeflate()
        )
        #expect(agreed.sendWindowBits == 12 && agreed.sendNoContextTakeover && !agreed.receiveNoContextTakeover)
        #expect(agreed.receiveWindowBits == 12, "the server's window is what the client's inflater keeps")
        let bare = try PerMessageDeflateNegotiation.accept("PerMessage-Deflate", offered: PerMessageDeflate(maxWindowBits: 11))
        #expect(bare.sendWindowBits == 11 && bare.receiveWindowBits == 15)
    }

    @Test(
        "answers the offer does not allow are refused",
        arguments: [
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
        #expect(throws: PerMessageDeflateNegotiation.Refusal.self) {
            _ = try PerMessageDeflateNegotiation.accept(answer, offered: PerMessageDeflate())
        }
        #expect(throws: PerMessageDeflateNegotiation.Refusal.self, "a larger server window than asked") {
            _ = try PerMessageDeflateNegotiation.accept(
                "permessage-deflate; server_max_window_bits=13", offered: PerMessageDeflate(peerMaxWindowBits: 12))
        }
        #expect(throws: PerMessageDeflateNegotiation.Refusal.self, "server_no_context_takeover was asked and not given") {
            _ = try PerMessageDeflateNegotiation.accept("permessage-deflate", offered: PerMessageDeflate(peerNoContextTakeover: true))
        }
    }

    // The inflater and compressor themselves, and RSV1 in the protocol engine, are tested in
    // DuplexWireTests (DeflateContextTests, WebSocketEngineTests).

    // MARK: Both ends over loopback

    /// A 100 KB repetitive message through a proxy that closes after 8 KB each way: only
    /// compressed does it fit, so an echo that comes back intact proves both directions.
    static func echoThroughNarrowProxy(upstreamPort: Int, path: String, compression: PerMessageDeflate?) async throws -> (
        echoed: Bool, extensions: String?
    ) {
        let proxy = try await FaultProxy.start(upstreamPort: upstreamPort)
        defer { Task { await proxy.stop() } }
        proxy.add(.closeAfter(bytes: 8_000), direction: .upstream)
        proxy.add(.closeAfter(bytes: 8_000), direction: .downstream)
        let socket = WebSocket(
            url: URL(string: "ws://127.0.0.1:\(proxy.port)\(path)")!, configuration: .init(maxMessageBytes: 1 << 20, compression: compression))
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
        var compressor = DeflateContext(agreement: DeflateAgreement(), zlib: LoopZlib())
        let bomb = compressor.deflate(allocator.buffer(repeating: 0x41, count: 2 << 20), allocator: allocator).payload
        let peer = try await ScriptedPeer.start { _ in
            .init(
                extraHeaders: [("Sec-WebSocket-Extensions", "permessage-deflate")],
                framesOnConnect: [WebSocketFrame(fin: true, rsv1: true, opcode: .text, data: bomb)]
            )
        }
        try await withTimeout(.seconds(20)) {
            let socket = WebSocket(
                url: URL(string: "ws://127.0.0.1:\(peer.port)/")!, configuration: .init(maxMessageBytes: 64 * 1024, compression: PerMessageDeflate()))
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
