import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Testing

/// The client against a third-party RFC 6455 server: Python's `websockets`, which `.ci/run`
/// starts and names in DUPLEX_INTEROP_WS_URL. Skipped when that is not set.
@Suite("interop with Python websockets", .enabled(if: ProcessInfo.processInfo.environment["DUPLEX_INTEROP_WS_URL"] != nil))
struct PythonInteropTests {
    static var url: URL { URL(string: ProcessInfo.processInfo.environment["DUPLEX_INTEROP_WS_URL"] ?? "ws://127.0.0.1:1")! }

    @Test("text, binary, a 1 MiB message and pings against a Python websockets echo server")
    func echo() async throws {
        // Pings every 400 ms, and 10 may go unanswered: Python echoing 1 MiB on a loaded machine
        // (two suites at once) can hold its pongs for over a second.
        try await withTimeout {
            let socket = WebSocket(url: Self.url, configuration: .init(ping: PingConfig(pingInterval: .milliseconds(400), maxPingFailures: 10)))
            let messages = socket.messages
            let roundTrips = socket.pingRoundTrips
            try await socket.connect()
            let big = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0) })
            try await socket.send("héllo from Swift")
            try await socket.send(Data([0, 255]))
            try await socket.send(big)
            var received: [WebSocketMessage] = []
            for await message in messages {
                received.append(message)
                if received.count == 3 { break }
            }
            #expect(received == [.string("héllo from Swift"), .data(Data([0, 255])), .data(big)])
            #expect(try await roundTrips.first(within: .seconds(5)) > .zero)
            await socket.disconnect()
            #expect(socket.state == .disconnected(.manuallyDisconnected))
        }
    }

    @Test("a session with the Python websockets server recorded through duplex's recorder, then replayed strictly to the same client")
    func recordAndReplay() async throws {
        try await withTimeout(.seconds(30)) {
            let recorder = CassetteRecorder()
            var configuration = DuplexServerConfiguration()
            configuration.record = RecordConfiguration(upstream: Self.url, recorder: recorder)
            let sent: [WebSocketMessage] = [.string("recorded once"), .data(Data([7, 8, 9])), .string("played forever")]
            func session(_ url: URL) async throws -> [WebSocketMessage] {
                let socket = WebSocket(url: url)
                let messages = socket.messages
                try await socket.connect()
                var received: [WebSocketMessage] = []
                for message in sent {
                    try await socket.send(message)
                    for await reply in messages {
                        received.append(reply)
                        break
                    }
                }
                await socket.disconnect()
                return received
            }
            let recorded = try await withDuplexServer(configuration: configuration) { server in
                try await session(server.webSocketURL("/"))
            }
            #expect(recorded == sent, "the Python server echoed through the recorder")
            let cassette = try Cassette(jsonLines: recorder.cassette().encoded())
            #expect(cassette.sessions.count == 1)
            #expect(cassette.sessions.first?.steps.filter { if case .message(.server, _) = $0.action { true } else { false } }.count == 3)
            let replayed = try await withReplayServer(cassette) { server in
                try await session(server.webSocketURL("/"))
            }
            #expect(replayed == sent, "the replay answers as the Python server did")
        }
    }

    @Test("permessage-deflate with a Python websockets server: negotiated, and 100 KB passes an 8 KB link both ways only compressed")
    func compression() async throws {
        try await withTimeout(.seconds(30)) {
            let port = try #require(Self.url.port)
            let compressed = try await PerMessageDeflateTests.echoThroughNarrowProxy(upstreamPort: port, path: "/", compression: PerMessageDeflate())
            #expect(compressed.extensions?.contains("permessage-deflate") == true, "\(compressed.extensions ?? "none")")
            #expect(compressed.echoed)
            let plain = try await PerMessageDeflateTests.echoThroughNarrowProxy(upstreamPort: port, path: "/", compression: nil)
            #expect(!plain.echoed)
        }
    }
}
