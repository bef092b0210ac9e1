import Duplex
import DuplexCallbacks
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Logging
import NIOHTTP1
import ServiceLifecycle
import Testing
import TestSupport

/// The flows the DocC articles and `docs/` show, run end to end against an in-process server, with
/// what each promises checked. The snippets themselves, exactly as shown, are compiled (and the
/// ones that are tests run) in `Tests/DuplexSnippetTests`; here each flow's behaviour is asserted.
/// Each test says where its flow is shown.
@Suite("Documented flows")
struct DocumentedFlowsTests {
    struct ChatLine: Codable, Equatable {
        var user: String
        var text: String
    }

    @Test("connect, send, receive, decode, disconnect, terminate")
    func basics() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let url = server.webSocketURL("/echo")
                // Duplex.docc/GettingStarted.md: Connect, send and receive
                let socket = WebSocket(url: url)
                let messages = socket.messages
                try await socket.connect()
                try await socket.send("hello")  // text
                try await socket.send(Data([1, 2, 3]))  // binary
                try await socket.sendJSON(ChatLine(user: "alice", text: "hi"))
                var received: [WebSocketMessage] = []
                for await message in messages {
                    received.append(message)
                    if received.count == 3 { break }
                }
                // GettingStarted.md: messages have .text and .data, and decode JSON
                // A timeout ends the loop early: fail, never index past the end.
                try #require(received.count == 3)
                #expect(received[0].text == "hello")
                #expect(received[1].data == Data([1, 2, 3]))
                let line = try received[2].decode(ChatLine.self)
                #expect(line == ChatLine(user: "alice", text: "hi"))
                await socket.disconnect(code: .normalClosure, reason: "done")  // streams stay open
                try await socket.connect()  // and connect works again
                await socket.terminate()  // ends every stream
            }
        }
    }

    @Test("requests with subprotocols and headers, events and states")
    func requestsEventsStates() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let request = WebSocketRequest(
                    url: server.webSocketURL("/echo"),
                    protocols: ["chat.v2"],
                    additionalHeaders: ["Authorization": "Bearer my-token"]
                )
                let socket = WebSocket(request: request)
                let events = socket.events
                let states = socket.stateEvents
                try await socket.connect()
                try await socket.send("ping me")
                var log: [String] = []
                for await event in events {
                    switch event {
                    case .connected(let chosen): log.append("connected \(chosen ?? "-")")
                    case .message(let message): log.append("message \(message.text ?? "")")
                    case .disconnected(let code, let reason): log.append("closed \(code?.rawValue ?? 1006) \(reason ?? "")")
                    case .error(let error): log.append("error \(error)")
                    }
                    if log.count == 2 { break }
                }
                #expect(log == ["connected chat.v2", "message ping me"], "/echo selects the first subprotocol offered")
                await socket.terminate()
                var seen: [WebSocketState] = []
                for await state in states { seen.append(state) }
                #expect(seen.first == .notConnected && seen.last == .disconnected(.terminated))
            }
        }
    }

    @Test("pings, reconnection and queued sends configure as ReconnectionAndResume.md shows")
    func configuration() async throws {
        // Duplex.docc/ReconnectionAndResume.md: Dead connections, Reconnection
        let socket = WebSocket(
            url: URL(string: "wss://example.invalid/live")!,
            configuration: .init(
                ping: PingConfig(pingInterval: .seconds(15), maxPingFailures: 2),
                reconnection: .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30), maxAttempts: 10),
                maxQueuedSends: 500
            )
        )
        socket.onPingFailed = { error in print("connection looks dead: \(error)") }
        #expect(socket.configuration.ping?.maxPingFailures == 2)
        #expect(socket.configuration.reconnection.delay(forAttempt: 10) == nil)
        let custom = ReconnectionStrategy(maxAttempts: 5) { attempt in
            attempt == 0 ? .milliseconds(100) : .seconds(2)
        }
        #expect(custom.delay(forAttempt: 1) == .seconds(2))
        // GettingStarted.md: TLS
        let local = WebSocketConfiguration(tlsTrust: .certificateAuthority(pem: "-----BEGIN CERTIFICATE-----\n…"))
        #expect(local.tlsTrust == .certificateAuthority(pem: "-----BEGIN CERTIFICATE-----\n…"))
        await socket.terminate()
    }

    @Test("docs/libraries.md: a socket with pings and reconnection echoes")
    func librariesInShort() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                // docs/libraries.md, in short
                let socket = WebSocket(
                    url: server.webSocketURL("/echo"),
                    configuration: .init(
                        ping: PingConfig(pingInterval: .seconds(15), maxPingFailures: 2),
                        reconnection: .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30))
                    )
                )
                let messages = socket.messages
                try await socket.connect()
                try await socket.send("hello")
                var texts: [String] = []
                for await message in messages {
                    texts.append(message.text ?? "\(message.data.count) bytes")
                    break
                }
                #expect(texts == ["hello"])
                await socket.terminate()
            }
        }
    }

    @Test("DuplexServer.docc: the server as a Service in a ServiceGroup reports its port and serves")
    func serverInServiceGroup() async throws {
        try await withTimeout {
            // DuplexServer.docc/DuplexServer.md
            let server = DuplexServer(configuration: .init(port: 0))
            let group = ServiceGroup(configuration: .init(services: [server], logger: Logger(label: "test")))
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                let port = try await server.port()
                let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(port)/echo")!)
                let messages = socket.messages
                try await socket.connect()
                try await socket.send("served")
                #expect(try await messages.first(within: .seconds(10)).text == "served")
                await socket.terminate()
                await group.triggerGracefulShutdown()
                try await tasks.waitForAll()
            }
        }
    }

    @Test("testing app code with MockWebSocket")
    func mock() async throws {
        // GettingStarted.md and DuplexTesting.docc/UsingTheServerInTests.md: Without sockets
        let (client, server) = MockWebSocket.pair()
        let atServer = server.messages
        try await client.send(.string("hello"))
        let first = try await atServer.first(within: .seconds(5))
        #expect(first.text == "hello")
        await client.disconnect(code: .normalClosure, reason: "done")
        #expect(server.state == .disconnected(.closed(code: .normalClosure, reason: "done")))
    }
}

@Suite("Documented flows: SSE")
struct DocumentedSSEFlowsTests {
    @Test("connect, receive, disconnect and resume, terminate")
    func basics() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let sse = ServerSentEventManager(
                    url: server.httpURL("/events?interval=20"),
                    retryPolicy: RetryPolicy(enabled: true, maxAttempts: nil, initialDelay: 1, maxDelay: 60, backoffMultiplier: 2)
                )
                let token: @Sendable () -> String = { "t" }
                sse.prepareRequest = { request in
                    var r = request; r.additionalHeaders["Authorization"] = "Bearer \(token())"; return r
                }
                let events = sse.events
                try await sse.connect()
                var seen: [ServerSentEvent] = []
                for await event in events {
                    print(event.id ?? "-", event.event ?? "message", event.data, event.retry ?? 0)
                    seen.append(event)
                    if seen.count == 2 { break }
                }
                #expect(seen.allSatisfy { $0.event == "tick" })
                await sse.disconnect()
                try await sse.connect()
                for await event in events {
                    seen.append(event)
                    if seen.count == 5 { break }
                }
                let ids = seen.compactMap { $0.id.flatMap { Int64($0) } }
                #expect(ids == Array(ids[0]..<(ids[0] + 5)), "resumed with Last-Event-ID: no gap, no duplicate")
                await sse.terminate()
            }
        }
    }

    struct Prompt: Encodable { var model: String; var prompt: String; var stream = true }
    struct Chunk: Decodable, Sendable { var text: String }

    /// docs/libraries.md's and GettingStarted.md's "Streaming a completion", as written, with
    /// the peer's URL for the API's: a completion, then a 429.
    @Test("streaming a completion: a POST with a JSON body, typed chunks to [DONE], and the API's error")
    func streamingACompletion() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { n in
                n == 1
                    ? .init(chunks: ["data: {\"text\":\"Hi\"}\n\n", "data: {\"text\":\"!\"}\n\n", "data: [DONE]\n\n"], stall: true)
                    : .init(
                        status: .tooManyRequests, headers: [("Retry-After", "20"), ("Content-Type", "application/json")],
                        chunks: [#"{"error":"rate limited"}"#])
            }
            defer { Task { await peer.stop() } }
            let apiKey = "k"
            var printed: [String] = []
            for _ in 1...2 {
                let request = try SSERequest(
                    url: URL(string: "http://127.0.0.1:\(peer.port)/v1/completions")!,
                    json: Prompt(model: "small", prompt: "Say hi"),
                    additionalHeaders: ["Authorization": "Bearer \(apiKey)"],
                    terminalEvent: .done  // data: [DONE]
                )
                let sse = ServerSentEventManager(request: request)
                let chunks = sse.events(decoding: Chunk.self)  // ask before connecting: it starts now
                do {
                    try await sse.connect()
                    for try await chunk in chunks { printed.append(chunk.text) }
                } catch let error as SSEError where error.code == .badStatus {
                    // 429, 401, 400...: the API's own error, and when to try again
                    printed.append("\(error.status ?? 0) \(error.response?.retryAfter ?? "-") \(error.response?.text ?? "")")
                }
            }
            #expect(printed == ["Hi", "!", #"429 20 {"error":"rate limited"}"#])
            let sent = try #require(peer.received.first)
            #expect(sent.method == .POST)
            #expect(sent.body.contains(#""prompt":"Say hi""#) && sent.body.contains(#""stream":true"#), "\(sent.body)")
            #expect(sent.headers["Authorization"] == ["Bearer k"])
        }
    }
}

@Suite("Documented flows: chat rooms")
struct DocumentedChatFlowTests {
    @Test("join, say, read events, wait for delivery, leave")
    func chat() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                // Duplex.docc/ChatRooms.md
                let chat = ChatClient(url: server.webSocketURL("/chat/lobby"), name: "alice")
                let events = chat.events
                let welcome = try await chat.join()
                #expect(welcome.members == ["alice"])
                try await chat.say("hello")
                var seen: [String] = []
                for await event in events {
                    switch event {
                    case .message(let message): seen.append("\(message.from): \(message.text)")
                    case .joined(let presence): seen.append("\(presence.name) joined")
                    default: break
                    }
                    if seen.count == 2 { break }
                }
                #expect(seen == ["alice joined", "alice: hello"])
                #expect(await chat.waitForDelivery(timeout: .seconds(5)))
                await chat.leave()
            }
        }
    }
}
