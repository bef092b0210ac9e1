import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import TestSupport
import Testing

/// Replay (issue 33): the Duplex clients against a cassette's recorded server side.
@Suite("replay")
struct ReplayTests {
    static let wait: Duration = .seconds(20)

    /// An echo-like session, as a cassette file holds it.
    static let chatLines = """
        {"duplex-cassette":1}
        {"open":{"kind":"websocket","path":"/chat/lobby","subprotocol":"duplex.chat.v1"},"session":1}
        {"at":0.001,"from":"server","session":1,"text":"welcome"}
        {"at":0.010,"from":"client","session":1,"text":"hello"}
        {"at":0.020,"from":"server","session":1,"text":"hello back"}
        {"at":0.021,"binary":"AQID","from":"server","session":1}
        {"at":0.030,"close":{"code":4001,"reason":"done"},"from":"server","session":1}
        """

    static func client(_ server: RunningReplayServer, _ path: String, protocols: [String] = []) -> WebSocket {
        WebSocket(request: WebSocketRequest(url: server.webSocketURL(path), protocols: protocols))
    }

    @Test("a WebSocket client meets the recorded server: its subprotocol, its messages in order after the client's, and its close")
    func webSocketSession() async throws {
        let cassette = try Cassette(jsonLines: Self.chatLines)
        try await withTimeout(Self.wait) {
            try await withReplayServer(cassette) { server in
                let socket = Self.client(server, "/chat/lobby", protocols: ["duplex.chat.v1"])
                let events = socket.events
                try await socket.connect()
                var iterator = events.makeAsyncIterator()
                #expect(await iterator.next() == .connected(protocol: "duplex.chat.v1"))
                #expect(await iterator.next() == .message(.string("welcome")))
                try await socket.send("hello")
                #expect(await iterator.next() == .message(.string("hello back")))
                #expect(await iterator.next() == .message(.data(Data([1, 2, 3]))))
                #expect(await iterator.next() == .disconnected(code: 4001, reason: "done"))
                await socket.terminate()
            }
        }
    }

    @Test(
        "a cassette's routes next to the built-in ones: the recorded path replays, /echo echoes, an unrecorded room is served live; without them, other paths are refused"
    )
    func nextToBuiltInRoutes() async throws {
        let cassette = try Cassette(jsonLines: Self.chatLines)
        try await withTimeout(Self.wait) {
            try await withReplayServer(cassette, builtInRoutes: true) { server in
                let replayed = Self.client(server, "/chat/lobby")
                let recorded = replayed.messages
                try await replayed.connect()
                #expect(try await recorded.first(within: Self.wait) == .string("welcome"), "the cassette's path comes first")
                await replayed.terminate()

                let echo = Self.client(server, "/echo")
                let echoed = echo.messages
                try await echo.connect()
                try await echo.send("live")
                #expect(try await echoed.first(within: Self.wait) == .string("live"))
                await echo.terminate()

                let live = ChatClient(url: server.webSocketURL("/chat/other"), name: "ana")
                let welcome = try await live.join(timeout: Self.wait)
                #expect(welcome.room == "other")
                await live.leave()
            }
            try await withReplayServer(cassette) { server in
                let echo = Self.client(server, "/echo")
                await #expect(throws: WebSocketError.self) { try await echo.connect() }
                await echo.terminate()
            }
        }
    }

    @Test("strict: a message that is not the recorded one closes with 1008, and the test fails with both sides; lenient lets it through")
    func strictMismatch() async throws {
        let cassette = try Cassette(jsonLines: Self.chatLines)
        try await withTimeout(Self.wait) {
            await #expect {
                try await withReplayServer(cassette) { server in
                    let socket = Self.client(server, "/chat/lobby")
                    let events = socket.events
                    try await socket.connect()
                    try await socket.send("hullo")
                    let closed = try await events.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
                    #expect(
                        closed
                            == .disconnected(
                                code: .policyViolation, reason: "replay mismatch at step 2: the client's message is not the recorded one"))
                    #expect(server.mismatches.count == 1)
                    await socket.terminate()
                }
            } throws: { error in
                let text = "\(error)"
                return error is ReplayMismatches
                    && text
                        == "replay mismatch in session 1 (/chat/lobby), step 2:\n  recorded: client text \"hello\"\n  received: client text \"hullo\""
            }

            try await withReplayServer(cassette, strict: false) { server in
                let socket = Self.client(server, "/chat/lobby")
                let messages = socket.messages
                try await socket.connect()
                try await socket.send("hullo")
                let replies = try await withTimeout(Self.wait) {
                    var replies: [WebSocketMessage] = []
                    for await message in messages {
                        replies.append(message)
                        if replies.count == 3 { break }
                    }
                    return replies
                }
                #expect(replies == [.string("welcome"), .string("hello back"), .data(Data([1, 2, 3]))])
                #expect(server.mismatches.isEmpty)
                await socket.terminate()
            }
        }
    }

    @Test("a matcher the test gives: JSON with a field ignored matches; more messages than recorded is a mismatch")
    func matcherAndExtraMessages() async throws {
        let cassette = Cassette(sessions: [
            .webSocket(
                "/rpc",
                steps: [
                    .client(.text(#"{"method":"ping","id":1}"#)),
                    .server(.text(#"{"result":"pong"}"#)),
                    .close(by: .client),
                ]
            )
        ])
        _ = try await withTimeout(Self.wait) {
            await #expect {
                try await withReplayServer(cassette, matcher: .jsonIgnoring(["id"])) { server in
                    let socket = Self.client(server, "/rpc")
                    let messages = socket.messages
                    try await socket.connect()
                    try await socket.send(#"{"id": 42, "method": "ping"}"#)
                    let reply = try await messages.first(within: Self.wait)
                    #expect(reply == .string(#"{"result":"pong"}"#))
                    try await socket.send("one more")
                    let events = socket.events
                    _ = try await events.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
                    await socket.terminate()
                }
            } throws: { error in
                "\(error)".contains("recorded: no more messages from the client (it has 1 in all)\n  received: client text \"one more\"")
            }
        }
    }

    @Test("recorded delays are kept: a reply recorded 300 ms after the client's message comes no sooner")
    func timing() async throws {
        let cassette = Cassette(sessions: [
            .webSocket("/slow", steps: [.client(.text("go"), at: .seconds(1)), .server(.text("done"), at: .milliseconds(1300))])
        ])
        try await withTimeout(Self.wait) {
            try await withReplayServer(cassette, speed: 1) { server in
                let socket = Self.client(server, "/slow")
                let messages = socket.messages
                try await socket.connect()
                let clock = ContinuousClock()
                let sent = clock.now
                try await socket.send("go")
                #expect(try await messages.first(within: Self.wait) == .string("done"))
                #expect(clock.now - sent >= .milliseconds(300))
                await socket.terminate()
            }
        }
    }

    @Test("SSE: the recorded events; a client that reconnects with Last-Event-ID gets the next session from after that id")
    func eventStream() async throws {
        let events = (1...4).map { ServerSentEvent(id: "\($0)", event: "tick", data: "n=\($0)") }
        let cassette = Cassette(sessions: [
            .eventStream("/events", steps: events.prefix(2).map { .event($0) } + [.disconnect(by: .server)]),
            .eventStream("/events", steps: events.map { .event($0) } + [.disconnect(by: .client, at: .seconds(1))]),
        ])
        try await withTimeout(Self.wait) {
            try await withReplayServer(cassette, configuration: .init(sseRetryMilliseconds: 20)) { server in
                let sse = ServerSentEventManager(
                    url: server.httpURL("/events"), retryPolicy: RetryPolicy(initialDelay: 0.02, maxDelay: 0.2, jitter: 0))
                let stream = sse.events
                try await sse.connect()
                var seen: [ServerSentEvent] = []
                for await event in stream {
                    seen.append(event)
                    if seen.count == 4 { break }
                }
                #expect(seen == events, "1 and 2 from the first session, then 3 and 4 from the second, after Last-Event-ID 2")
                await sse.terminate()
            }
        }
    }

    @Test("a path the cassette does not have is 404, or refused as a WebSocket; one it has for WebSocket is 426 without an upgrade")
    func unrecordedPaths() async throws {
        let cassette = try Cassette(jsonLines: Self.chatLines)
        try await withTimeout(Self.wait) {
            try await withReplayServer(cassette) { server in
                let missing = try await HTTPProbe.get(server.httpURL("/echo"), caPEM: nil)
                #expect(missing.status == 404)
                let upgrade = try await HTTPProbe.get(server.httpURL("/chat/lobby"), caPEM: nil)
                #expect(upgrade.status == 426)
                let socket = Self.client(server, "/echo")
                await #expect(throws: WebSocketError.self) { try await socket.connect() }
                await socket.terminate()
            }
        }
    }

    @Test("a pongs step withholds the replayed server's pongs from there on: the client's keep-alive fails as it did when recorded")
    func withheldPongs() async throws {
        let cassette = Cassette(sessions: [
            Cassette.Session(
                kind: .webSocket,
                path: "/feed",
                steps: [.server(.text("hello"), at: .zero), .pongs(false, at: .milliseconds(1))]
            )
        ])
        let text = cassette.encoded()
        #expect(try Cassette(jsonLines: text) == cassette)
        try await withTimeout {
            try await withReplayServer(cassette) { server in
                let socket = WebSocket(
                    url: server.webSocketURL("/feed"),
                    configuration: .init(ping: PingConfig(pingInterval: .milliseconds(100), maxPingFailures: 2, pongTimeout: .milliseconds(100)))
                )
                let messages = socket.messages
                let states = socket.stateEvents
                try await socket.connect()
                #expect(try await messages.first(within: .seconds(5)) == .string("hello"))
                let lost = try await states.first(within: .seconds(10)) { if case .disconnected(.pingFailed) = $0 { true } else { false } }
                #expect(lost == .disconnected(.pingFailed(missedPings: 2)))
                await socket.terminate()
            }
        }
    }
}
