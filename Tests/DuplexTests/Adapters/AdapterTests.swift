import Duplex
import DuplexCallbacks
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

@Suite("typed channel, callback adapter and mock pair")
struct AdapterTests {
    @Test("the typed channel speaks the chat protocol with the real server")
    func typedChannelWithChat() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let socket = WebSocket(url: server.webSocketURL("/chat/typed?name=tess"))
                let channel = WebSocketCodableChannel<ChatClientFrame, ChatServerFrame>(
                    socket: socket,
                    encoder: { ChatProtocol.makeEncoder() },
                    decoder: { ChatProtocol.makeDecoder() }
                )
                let frames = channel.receive()
                try await channel.connect()
                try await channel.sendMessage(.say(ChatSay(clientMessageID: "t-1", text: "typed")))
                var types: [String] = []
                for try await frame in frames {
                    types.append(frame.type)
                    if case .ack(let ack) = frame {
                        #expect(ack.clientMessageID == "t-1")
                        break
                    }
                }
                #expect(types == ["welcome", "joined", "message", "ack"])
                await socket.terminate()
            }
        }
    }

    @Test("a frame that does not decode is reported, not skipped")
    func undecodableFrame() async throws {
        try await withTimeout {
            let (client, server) = MockWebSocket.pair()
            let channel = WebSocketCodableChannel<ChatClientFrame, ChatServerFrame>(socket: client)
            let results = channel.receiveResults()
            let frames = channel.receive()
            try await server.send(#"{"type":"mystery","v":1}"#)
            guard case .failure(let error) = try await results.first(within: .seconds(5)) else {
                Issue.record("expected a decoding failure")
                return
            }
            #expect(error.code == .decodingFailed)
            await #expect(throws: WebSocketError.self) { for try await _ in frames {} }
        }
    }

    @Test("the callback adapter connects, delivers messages and states, sends, and disconnects")
    func callbacks() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let adapter = WebSocketCallbackAdapter(url: server.webSocketURL("/echo"))
                let (received, receivedInput) = AsyncStream.makeStream(of: String.self)
                let (states, statesInput) = AsyncStream.makeStream(of: WebSocketState.self)
                adapter.onMessage { receivedInput.yield($0.text ?? "") }
                adapter.onStateChange { statesInput.yield($0) }
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    adapter.connect { continuation.resume(with: $0) }
                }
                #expect(adapter.socket.state == .connected(protocol: nil))
                try await withCheckedThrowingContinuation { continuation in
                    adapter.send(.string("via callbacks")) { continuation.resume(with: $0) }
                }
                #expect(try await received.first(within: .seconds(5)) == "via callbacks")
                try await withCheckedThrowingContinuation { continuation in
                    adapter.disconnect { continuation.resume(with: $0) }
                }
                #expect(
                    try await states.first(within: .seconds(5)) { $0 == .disconnected(.manuallyDisconnected) } == .disconnected(.manuallyDisconnected)
                )
                adapter.terminate()
            }
        }
    }

    @Test("a mock pair: messages cross in order, closing one disconnects both, connect joins them again")
    func mockPair() async throws {
        try await withTimeout {
            let (client, server) = MockWebSocket.pair()
            let atServer = server.messages
            let serverEvents = server.events
            for i in 0..<3 { try await client.send("m\(i)") }
            var texts: [String] = []
            for await message in atServer {
                texts.append(message.text ?? "")
                if texts.count == 3 { break }
            }
            #expect(texts == ["m0", "m1", "m2"])
            #expect(client.sentMessages.count == 3)
            await client.disconnect(code: .goingAway, reason: "bye")
            #expect(client.state == .disconnected(.manuallyDisconnected))
            #expect(server.state == .disconnected(.closed(code: .goingAway, reason: "bye")))
            #expect(
                try await serverEvents.first(within: .seconds(5)) { if case .disconnected = $0 { true } else { false } }
                    == .disconnected(code: .goingAway, reason: "bye"))
            await #expect(throws: WebSocketError.self) { try await server.send("nobody listens") }
            let atClient = client.messages
            try await server.connect()
            #expect(client.state == .connected(protocol: nil))
            try await server.send("again")
            #expect(try await atClient.first(within: .seconds(5)).text == "again")
            await client.terminate()
            await #expect(throws: WebSocketError.self) { try await client.connect() }
        }
    }

    @Test("a mock server loop ends when the client closes or the connection drops; the client's streams stay open, as a WebSocket's do")
    func mockServerLoopEnds() async throws {
        try await withTimeout {
            let (client, server) = MockWebSocket.pair()
            let atServer = server.messages
            let loop = Task {
                var seen: [String] = []
                for await message in atServer { seen.append(message.text ?? "") }
                return seen
            }
            try await client.send("one")
            try await client.send("two")
            await client.disconnect(code: .normalClosure, reason: "done")
            #expect(await loop.value == ["one", "two"], "the loop ended at the close")

            let clientMessages = client.messages
            try await client.connect()
            let againAtServer = server.messages
            let second = Task {
                var count = 0
                for await _ in againAtServer { count += 1 }
                return count
            }
            try await server.send("to the client")
            #expect(try await clientMessages.first(within: .seconds(5)).text == "to the client")
            try await client.send("again")
            server.drop()
            #expect(await second.value <= 1, "the second loop ended at the drop")
            #expect(client.state == .disconnected(.closed(code: .abnormalClosure, reason: "")))
            #expect(server.state == .disconnected(.closed(code: .abnormalClosure, reason: "")))
            await client.terminate()
        }
    }

    /// App code written against the protocol: pings, flushes, and reports ping failures.
    static func keepAlive(_ socket: some WebSocketProtocol, failures: NIOLockedValueBox<[String]>) async throws -> Duration {
        socket.onPingFailed = { error in failures.withLockedValue { $0.append(error.code.description) } }
        try await socket.send("state")
        try await socket.flush()
        return try await socket.ping(timeout: .seconds(5))
    }

    @Test("WebSocketProtocol has ping, flush and ping failures: a mock and a real socket against a scripted route answer alike")
    func protocolPingAndFlush() async throws {
        try await withTimeout {
            let (client, server) = MockWebSocket.pair()
            client.pingRoundTrip = .milliseconds(7)
            let mockFailures = NIOLockedValueBox<[String]>([])
            #expect(try await Self.keepAlive(client, failures: mockFailures) == .milliseconds(7))
            client.failPings(missedPings: 3)
            #expect(client.state == .disconnected(.pingFailed(missedPings: 3)))
            #expect(server.state == .disconnected(.closed(code: .abnormalClosure, reason: "")))
            #expect(mockFailures.withLockedValue { $0 } == ["pingFailed"])
            await #expect(throws: WebSocketError.self) { try await client.ping(timeout: .seconds(1)) }

            let quiet = ScriptedRoute.webSocket("/quiet", script: WebSocketScript(answerPings: false))
            try await withDuplexServer(routes: [quiet]) { running in
                let socket = WebSocket(
                    url: running.webSocketURL("/quiet"),
                    configuration: .init(ping: PingConfig(pingInterval: .milliseconds(100), maxPingFailures: 2, pongTimeout: .milliseconds(100)))
                )
                let states = socket.stateEvents
                try await socket.connect()
                let failures = NIOLockedValueBox<[String]>([])
                await #expect(throws: WebSocketError.self) { try await Self.keepAlive(socket, failures: failures) }
                _ = try await states.first(within: .seconds(10)) { if case .disconnected(.pingFailed) = $0 { true } else { false } }
                #expect(failures.withLockedValue { $0 } == ["pingFailed"])
                await socket.terminate()
            }
        }
    }
}
