// Seed 001 (a protocol-based WebSocket module), its examples with `import Duplex` and
// `import DuplexTesting`. Edits:
// - Patterns on `.text(let …)` and `.binary(let …)` are written `.string(let …)` and
//   `.data(let …)`: Duplex's message cases are seed 004's (and Foundation's), and Swift offers no
//   fix-it for a pattern. Built with `.text(…)` and `.binary(…)`, read with `.text` and `.data`,
//   compile unchanged. (Each such line is marked `// seed: .text` or `// seed: .binary`.)
// - The seed library's own logger types (`OSLogFiberLogger`, `PrintFiberLogger`) are a swift-log
//   `Logger`.
// - Placeholders (`...`, `imageData`, `myEncodable`, `handle`, `process`, `currentToken`) are
//   filled in; the two `let msg` of "Message Properties" get a scope each.
// - The `configuration:` example builds a `URLSessionConfiguration`, which on Linux lives in
//   FoundationNetworking: it compiles on Apple platforms.
import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Logging
import Testing

enum Seed001 {
    struct ChatMessage: Codable, Sendable {
        let user: String
        let text: String
        let timestamp: Date
    }

    struct JoinMessage: Codable, Sendable {
        let type: String
    }

    static let imageData = Data([0x89, 0x50, 0x4E, 0x47])
    static let binaryData = Data([1, 2, 3])
    static let myEncodable = JoinMessage(type: "join")
    static let currentToken = "token"
    static func handle(_ message: WebSocketMessage) {}
    static func process(_ data: Data) {}

    static func connecting() -> WebSocket {
        let ws = URLSessionWebSocketTransport.connect(
            to: URL(string: "wss://ws.example.com/chat")!
        )
        return ws
    }

    #if canImport(Darwin)
    static func connectingWithConfiguration() -> WebSocket {
        let ws = URLSessionWebSocketTransport.connect(
            to: URL(string: "wss://ws.example.com/chat")!,
            headers: [
                "Authorization": "Bearer my-token",
                "X-Client-ID": "ios-app"
            ],
            protocols: ["chat.v2"],
            configuration: {
                let config = URLSessionConfiguration.default
                config.timeoutIntervalForRequest = 30
                return config
            }()
        )
        return ws
    }
    #endif

    static func sending(_ ws: some WebSocketProtocol) async throws {
        // Plain text
        try await ws.send("Hello, server!")

        // Binary data
        try await ws.send(imageData)

        // JSON-encoded
        try await ws.sendJSON(ChatMessage(user: "alice", text: "hello", timestamp: Date()))

        // WebSocketMessage enum directly
        try await ws.send(.text("ping"))
        try await ws.send(.binary(binaryData))
        try await ws.send(.json(myEncodable))
    }

    static func receivingEvents(_ ws: some WebSocketProtocol, log: Log) async throws {
        for await event in ws.events {
            switch event {
            case .connected:
                print("Connected!")
                try await ws.send("Hello")

            case .message(.string(let text)):  // seed: .text
                print("Text: \(text)")
                log.withLockedValue { $0.append("text \(text)") }

            case .message(.data(let data)):  // seed: .binary
                print("Binary: \(data.count) bytes")
                log.withLockedValue { $0.append("binary \(data.count)") }

            case .disconnected(let code, let reason):
                print("Disconnected: code=\(code ?? 0) reason=\(reason ?? "")")
                log.withLockedValue { $0.append("disconnected \(code ?? 0)") }

            case .error(let error):
                print("Error: \(error)")
            }
        }
    }

    static func receivingMessages(_ ws: some WebSocketProtocol, log: Log) async {
        for await message in ws.messages {
            switch message {
            case .string(let text):  // seed: .text
                print(text)
                log.withLockedValue { $0.append(text) }
            case .data(let data):  // seed: .binary
                process(data)
            }
        }
    }

    static func typedSending(_ ws: some WebSocketProtocol) async throws {
        // Convenience method on the WebSocket
        try await ws.sendJSON(ChatMessage(
            user: "alice",
            text: "hello everyone",
            timestamp: Date()
        ))

        // Or create a message explicitly
        let msg = try WebSocketMessage.json(ChatMessage(user: "bob", text: "hi", timestamp: Date()))
        try await ws.send(msg)
    }

    static func decoding(_ ws: some WebSocketProtocol, log: Log) async {
        for await message in ws.messages {
            if let chat: ChatMessage = try? message.decode() {
                print("\(chat.user): \(chat.text)")
                log.withLockedValue { $0.append("\(chat.user): \(chat.text)") }
            }
        }
    }

    static func messageProperties() -> [String?] {
        var seen: [String?] = []
        do {
            let msg = WebSocketMessage.text("hello")
            msg.text   // "hello"
            msg.data   // Data("hello".utf8)
            seen += [msg.text, String(decoding: msg.data, as: UTF8.self)]
        }
        do {
            let myData = Data([0xFF])
            let msg = WebSocketMessage.binary(myData)
            msg.text   // nil
            msg.data   // myData
            seen += [msg.text, msg.data == myData ? "myData" : "other"]
        }
        return seen
    }

    static func reconnecting(url: URL) -> ReconnectingWebSocket {
        let ws = ReconnectingWebSocket(
            connect: {
                URLSessionWebSocketTransport.connect(
                    to: url,
                    headers: ["Authorization": "Bearer \(currentToken)"]
                )
            },
            strategy: .exponentialBackoff(
                baseDelay: 1.0,        // start at 1s
                maxDelay: 30.0,        // cap at 30s
                maxAttempts: 10         // give up after 10 attempts
            ),
            logger: Logger(label: "com.myapp.ws")
        )
        return ws
    }

    static func reconnectingUse(_ ws: ReconnectingWebSocket, log: Log) async throws {
        // Start the connection
        Task { await ws.start() }

        // Use normally — reconnection is transparent
        for await event in ws.events {
            switch event {
            case .connected:
                print("Connected (or reconnected)")
                log.withLockedValue { $0.append("connected") }
                // Send messages (queued if reconnecting)
                try await ws.send(.text("hello"))
            case .message(let msg):
                handle(msg)
                log.withLockedValue { $0.append("message \(msg.text ?? "")") }
            case .disconnected:
                print("Disconnected — will auto-reconnect")
                log.withLockedValue { $0.append("disconnected") }
            case .error(let error):
                print("Error: \(error) — will auto-reconnect")
            }
        }
    }

    static func stopping(_ ws: ReconnectingWebSocket) {
        // Stop reconnection and close
        ws.stop()
    }

    static func strategies() -> [ReconnectionStrategy] {
        [.exponentialBackoff(), .fixedDelay(5.0), .linearBackoff(), .none]
    }

    static func customStrategy(url: URL) -> (ReconnectionStrategy, ReconnectingWebSocket) {
        let custom = ReconnectionStrategy(
            maxAttempts: 5,
            delayForAttempt: { attempt in
                // Custom: fast first retry, then slow
                attempt == 0 ? 0.1 : Double(attempt) * 2.0
            }
        )

        let ws = ReconnectingWebSocket(
            connect: { URLSessionWebSocketTransport.connect(to: url) },
            strategy: custom
        )
        return (custom, ws)
    }

    static func lifecycle(_ ws: some WebSocketProtocol) {
        ws.state  // .connecting, .connected, .disconnecting, .disconnected

        // Graceful close with default code (1000)
        ws.close()

        // With specific close code and reason
        ws.close(code: 1001, reason: "Going away")
    }

    static func mockPair() async throws {
        // Create a paired mock — messages sent to one appear on the other
        let (client, server) = MockWebSocket.pair()

        // Simulate server sending a message
        try await server.send(.text("welcome"))

        // Client receives it
        for await event in client.events {
            if case .message(.string(let text)) = event {  // seed: .text
                #expect(text == "welcome")
                break
            }
        }

        // Test client sending
        try await client.send(.text("hello"))
        for await event in server.events {
            if case .message(.string(let text)) = event {  // seed: .text
                #expect(text == "hello")
                break
            }
        }

        // Test disconnection
        client.close(code: 1000, reason: "test done")
        #expect(client.state == .disconnected)
        #expect(server.state == .disconnected)
    }

    // MARK: Real-World Example: Chat Room

    // MARK: - Pure function: parse incoming WebSocket events into chat messages

    static func parseChatMessage(_ event: WebSocketEvent) -> ChatMessage? {
        guard case .message(let msg) = event else { return nil }
        return try? msg.decode(ChatMessage.self)
    }

    // MARK: - Factory: create a chat WebSocket for a given room

    static func makeChatSocket(roomID: String, token: String, base: String = "wss://chat.example.com") -> ReconnectingWebSocket {
        ReconnectingWebSocket(
            connect: {
                URLSessionWebSocketTransport.connect(
                    to: URL(string: "\(base)/rooms/\(roomID)")!,
                    headers: ["Authorization": "Bearer \(token)"]
                )
            },
            strategy: .exponentialBackoff(maxAttempts: 20),
            logger: Logger(label: "chat")
        )
    }

    // MARK: - Usage: compose everything

    static func runChat(roomID: String, token: String, user: String, ws: ReconnectingWebSocket, log: Log) async throws {
        Task { await ws.start() }

        for await event in ws.events {
            switch event {
            case .connected:
                try await ws.send(.json(JoinMessage(type: "join")))

            case .message:
                if let chat = parseChatMessage(event) {
                    print("[\(chat.user)] \(chat.text)")
                    log.withLockedValue { $0.append("[\(chat.user)] \(chat.text)") }
                } else {
                    log.withLockedValue { $0.append("other") }
                }

            case .disconnected, .error:
                break  // ReconnectingWebSocket handles reconnection
            }
        }
    }

    // Send a message — just a function call on the socket value
    static func sendChat(_ text: String, as user: String, via ws: ReconnectingWebSocket) async throws {
        try await ws.send(.json(ChatMessage(user: user, text: text, timestamp: Date())))
    }
}

@Suite("Seed 001: the protocol-based WebSocket module's examples")
struct Seed001Tests {
    @Test("sending text, binary and JSON, and the events switch, against /echo")
    func eventsAndSending() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                let ws = WebSocket(url: server.webSocketURL("/echo"))
                let log = Log()
                let messages = Log()
                let decoded = Log()
                let events = Task { try await Seed001.receivingEvents(ws, log: log) }
                let reading = Task { await Seed001.receivingMessages(ws, log: messages) }
                let decoding = Task { await Seed001.decoding(ws, log: decoded) }
                try await ws.connect()
                // The events loop greets on .connected, whenever it started (events starts with
                // .connected on an open socket).
                await log.wait { $0.contains("text Hello") }
                // The other two readers subscribe when their tasks run: probe until both do.
                try await Self.probe(ws, until: messages) { $0.contains { $0.contains("probe") } }
                try await Self.probe(ws, until: decoded) { $0.contains("probe: probe") }
                try await Seed001.sending(ws)
                try await Seed001.typedSending(ws)
                await decoded.wait { $0.contains("bob: hi") }
                #expect(decoded.values.filter { $0 != "probe: probe" } == ["alice: hello", "alice: hello everyone", "bob: hi"])
                await messages.wait { $0.contains("ping") }
                let texts = messages.values.filter { !$0.contains("probe") && !$0.hasPrefix("{") }
                #expect(texts.suffix(2) == ["Hello, server!", "ping"], "text messages in order (binary ones go to process(_:))")
                await ws.disconnect(code: .goingAway, reason: "done")
                await log.wait { $0.contains { $0.hasPrefix("disconnected") } }
                #expect(log.values.contains("binary 4") && log.values.contains("text ping"))
                await ws.terminate()
                _ = try await events.value
                await reading.value
                await decoding.value
            }
        }
    }

    /// Sends a probe chat line until `log` shows its reader got one.
    static func probe(_ ws: WebSocket, until log: Log, _ seen: @escaping @Sendable ([String]) -> Bool) async throws {
        while !seen(log.values) {
            try await ws.sendJSON(Seed001.ChatMessage(user: "probe", text: "probe", timestamp: Date()))
            _ = try? await withTimeout(.milliseconds(200)) { await log.wait(until: seen) }
        }
    }

    @Test("message properties, strategies in seconds, close without waiting")
    func properties() async throws {
        #expect(Seed001.messageProperties() == ["hello", "hello", nil, "myData"])
        let strategies = Seed001.strategies()
        #expect(strategies[1].delay(forAttempt: 3) == .seconds(5))
        #expect(strategies[2].delay(forAttempt: 2) == .seconds(3))
        #expect(strategies[3].delay(forAttempt: 0) == nil)
        let (custom, _) = Seed001.customStrategy(url: URL(string: "ws://127.0.0.1:1/")!)
        #expect(custom.delay(forAttempt: 0) == .milliseconds(100))
        #expect(custom.delay(forAttempt: 3) == .seconds(6))
        #expect(custom.delay(forAttempt: 5) == nil)
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                let ws = WebSocket(url: server.webSocketURL("/echo"))
                let states = ws.stateEvents
                try await ws.connect()
                Seed001.lifecycle(ws)
                await #expect(throws: WebSocketError.self) { try await ws.send("after close") }
                _ = try await states.first(within: .seconds(10)) { $0 == .disconnected }
            }
        }
    }

    @Test("the paired mock, as the seed tests with it (a message sent before the reader asks is kept)")
    func mock() async throws {
        try await withTimeout(.seconds(10)) { try await Seed001.mockPair() }
    }

    @Test("ReconnectingWebSocket: a fresh socket per connection; reconnects after a drop; sends queued meanwhile")
    func reconnecting() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                let (_, ws) = Seed001.customStrategy(url: server.webSocketURL("/echo"))
                let log = Log()
                let using = Task { try await Seed001.reconnectingUse(ws, log: log) }
                await log.wait { $0.contains("message hello") }
                #expect(server.server.dropConnections() >= 1)
                await log.wait { $0.filter { $0 == "message hello" }.count == 2 }
                #expect(log.values.filter { $0 == "connected" }.count == 2)
                #expect(log.values.contains("disconnected"))
                Seed001.stopping(ws)
                _ = try await ws.stateEvents.first(within: .seconds(10)) { $0 == .disconnected(.manuallyDisconnected) }
                await #expect(throws: WebSocketError.self) { try await ws.send(.text("after stop")) }
                await ws.terminate()
                _ = try await using.value
                #expect(Seed001.reconnecting(url: server.webSocketURL("/echo")).strategy.maxAttempts == 10)
            }
        }
    }

    @Test("the chat-room example runs against /echo: it joins, and parses the chat lines it gets back")
    func chatRoom() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                let base = "ws://127.0.0.1:\(server.port)"
                // /echo stands in for the seed's chat server: what is said comes back.
                let ws = ReconnectingWebSocket(
                    connect: { URLSessionWebSocketTransport.connect(to: URL(string: "\(base)/echo")!) },
                    strategy: .exponentialBackoff(maxAttempts: 20)
                )
                _ = Seed001.makeChatSocket(roomID: "lobby", token: "t", base: base)
                let log = Log()
                let chat = Task { try await Seed001.runChat(roomID: "lobby", token: "t", user: "alice", ws: ws, log: log) }
                await log.wait { $0 == ["other"] }  // the join, echoed: not a chat line
                try await Seed001.sendChat("hi all", as: "alice", via: ws)
                await log.wait { $0.contains("[alice] hi all") }
                await ws.terminate()
                _ = try await chat.value
            }
        }
    }
}
