// The snippets of README, docs/ and the DocC articles that continue what their page set up (a
// `socket`, a `server`), each inside a function that sets that up first and uses what the snippet
// made after it. They are compiled, not run: the ones that run are the whole tests beside this
// file. Each function names the page its snippet is on. This folder is not run through
// swift-format: each snippet stays as its page shows it.
import Duplex
import DuplexCallbacks
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Testing

// MARK: - docs/cassettes.md

private func cassetteInCode() -> Cassette {
    let cassette = Cassette(sessions: [
        .webSocket("/echo", steps: [.client(.text("hello")), .server(.text("hello")), .close(by: .client)]),
        .eventStream("/events", steps: [.event(ServerSentEvent(id: "1", data: "one")), .disconnect(by: .server)]),
    ])
    return cassette
}

// MARK: - docs/scenarios.md

private func scenarioFromAFile() async throws {
    let scenario = try FaultScenario(contentsOf: "Tests/Scenarios/flaky.json")   // or built in code
    try await withDuplexServer(configuration: .init(chaos: true)) { server in
        try await withScenario(scenario, upstreamPort: server.port) { proxy in
            let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(proxy.port)/echo")!)
            try await socket.connect()
            // drive the client; each step is logged (at notice) as it takes effect
        }
    }
}

// MARK: - Duplex.docc/ChatRooms.md

private func chatRoom() async throws {
    let chat = ChatClient(url: URL(string: "ws://127.0.0.1:8080/chat/lobby")!, name: "alice")
    let events = chat.events
    let welcome = try await chat.join()                 // throws ChatProtocolError if refused
    print(welcome.members)                              // ["alice", ...]
    try await chat.say("hello")                         // resent after a reconnection until acked
    for await event in events {
        switch event {
        case .message(let message): print("\(message.from): \(message.text)")
        case .joined(let presence): print("\(presence.name) joined")
        case .disconnected(_, let reconnecting): print(reconnecting ? "reconnecting" : "closed")
        default: break
        }
    }
    _ = await chat.waitForDelivery(timeout: .seconds(5))  // true once every message is acked
    await chat.leave()
}

// MARK: - Duplex.docc/GettingStarted.md

private func requestsEventsAndStates() async {
    let request = WebSocketRequest(
        url: URL(string: "wss://example.com/chat")!,
        protocols: ["chat.v2"],                                  // the chosen one: socket.negotiatedProtocol
        additionalHeaders: ["Authorization": "Bearer my-token"]
    )
    let socket = WebSocket(request: request)

    for await event in socket.events {
        switch event {
        case .connected(let chosenProtocol): print("open", chosenProtocol ?? "-")
        case .message(let message): print(message)
        case .disconnected(let code, let reason): print("closed", code ?? 1006, reason ?? "")   // nil, nil: no close frame came
        case .error(let error): print(error)
        }
    }
    for await state in socket.stateEvents { print(state) }   // notConnected, connecting, connected, disconnected(reason)
    print(socket.state)
    if case .disconnected(let reason) = socket.state { print(reason) }   // or match .disconnected(.pingFailed)
}

private func newestOnly(_ socket: WebSocket, show: (WebSocketMessage) -> Void) async {
    for await message in socket.messages(buffering: .newest(100)) { show(message) }  // or .oldest(n)
}

private func trust(caPEM: String) -> [WebSocketConfiguration] {
    let trusting = WebSocketConfiguration(tlsTrust: .certificateAuthority(pem: caPEM))  // or try .certificateAuthority(pemFile: path)
    let insecure = WebSocketConfiguration(tlsTrust: .insecureAcceptAnyCertificate)     // local testing only
    return [trusting, insecure]
}

private func proxies() throws -> WebSocketConfiguration {
    var configuration = WebSocketConfiguration()
    configuration.proxy = try Proxy(url: "http://user:secret@proxy.example:3128")
    configuration.proxy = .socks5(host: "127.0.0.1", port: 1080)
    configuration.proxy = .environment      // https_proxy, http_proxy, all_proxy, no_proxy
    return configuration
}

private func http2() -> WebSocket {
    var configuration = WebSocketConfiguration()
    configuration.httpVersion = .http2        // or .automatic: HTTP/2 where the server offers it
    let socket = WebSocket(url: URL(string: "wss://example.com/echo")!, configuration: configuration)
    return socket
}

private func typedMessages(socket: WebSocket) async throws {
    let channel = WebSocketCodableChannel<ChatClientFrame, ChatServerFrame>(socket: socket)
    try await channel.sendMessage(.say(ChatSay(clientMessageID: "1", text: "hi")))
    for try await frame in channel.receive() { print(frame) }   // throws .decodingFailed on a bad frame
}

// MARK: - Duplex.docc/ReconnectionAndResume.md and docs/libraries.md

private func pingsAndReconnection() -> WebSocket {
    let socket = WebSocket(
        url: URL(string: "wss://example.com/live")!,
        configuration: .init(
            ping: PingConfig(pingInterval: .seconds(15), maxPingFailures: 2),
            reconnection: .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30), maxAttempts: 10),
            maxQueuedSends: 500
        )
    )
    socket.onPingFailed = { error in print("connection looks dead: \(error)") }
    // socket.pingRoundTripTime and socket.pingRoundTrips give the measured round trips
    return socket
}

private func networkChanges(socket: WebSocket, chat: ChatClient, sse: ServerSentEventManager) async {
    #if canImport(Network)
    // On Apple platforms: checks them on every change of the network path (NWPathMonitor).
    let watcher = NetworkPathWatcher(checking: [socket, chat, sse])
    // Anywhere, e.g. when scenePhase becomes .active:
    await socket.checkConnection(within: .seconds(2))
    withExtendedLifetime(watcher) {}
    #else
    await socket.checkConnection(within: .seconds(2))
    #endif
}

private func strategyOfYourOwn() -> WebSocketConfiguration {
    var configuration = WebSocketConfiguration()
    configuration.reconnection = ReconnectionStrategy(maxAttempts: 5) { attempt in
        attempt == 0 ? .milliseconds(100) : .seconds(2)
    }
    return configuration
}

private struct Hello: Encodable { var token: String }
private struct HandshakeRefused: Error {}
private actor Tokens { func current() -> String { "token" } }

private func preamble(socket: WebSocket, tokens: Tokens) {
    socket.preamble = { connection in
        try connection.sendJSON(Hello(token: await tokens.current()))
        let reply = try await connection.receive(timeout: .seconds(5))   // taken from the streams
        guard reply.text?.contains("welcome") == true else { throw HandshakeRefused() }
    }
}

// MARK: - DuplexServer.docc/DuplexServer.md

private func scriptedRoutesInProcess() -> DuplexServer {
    var configuration = DuplexServerConfiguration(port: 0)
    configuration.routes = [
        .webSocket("/feed", script: WebSocketScript(onConnect: [.send("hello")], onMessage: [ScriptRule(match: .text("bye"), do: [.close(code: 4001, reason: "bye")])])),
        .sse("/orders", script: SSEScript(events: [SSEScriptEvent(id: "1", data: "a")], then: .drop)),
    ]
    let server = DuplexServer(configuration: configuration)
    // … what /feed and /orders served and received: server.journal.entries
    return server
}

private func tlsFaultsInProcess() throws -> DuplexServer {
    var configuration = DuplexServerConfiguration(port: 0)
    var tls = try DuplexServerTLS.selfSigned()
    tls.faults = true
    configuration.tls = tls
    let server = DuplexServer(configuration: configuration)
    // … once it listens: server.tlsFaultPorts[.expired] is the port of the expired certificate
    return server
}

// MARK: - DuplexTesting.docc/Faults.md

private func serverFaults() async throws {
    try await withDuplexServer { server in
        server.server.dropConnections(.route("echo"))                     // TCP closes, no close frame
        server.server.closeConnections(.room("lobby"), code: .goingAway)  // close frame; SSE streams end
        server.server.stallConnections(.all, for: .seconds(5))            // pings go unanswered
        server.server.endEventStreams(.route("events"))
        server.server.refuseConnections(for: .seconds(3))                 // 503 for new connections
        server.server.restart(downFor: .seconds(1))                       // 1001 to all, then back on the same port
    }
}

private func proxyFaults() async throws {
    try await withDuplexServer { server in
        let proxy = try await FaultProxy.start(upstreamPort: server.port)   // listens on 127.0.0.1:proxy.port
        let url = URL(string: "ws://127.0.0.1:\(proxy.port)/echo")!
        let lag = proxy.add(.latency(.milliseconds(200), jitter: .milliseconds(20)), direction: .downstream)
        proxy.add(.bandwidth(bytesPerSecond: 50_000), direction: .both)
        proxy.add(.slicer(averageSize: 3, sizeVariation: 2, delay: .milliseconds(1)), direction: .upstream)
        proxy.add(.blackhole, direction: .both)        // silent path, TCP stays open: only pings notice
        proxy.add(.resetPeer, direction: .both)        // TCP reset
        proxy.add(.closeAfter(bytes: 400), direction: .downstream)
        proxy.add(.pathSwitch, direction: .both)      // the connections open now go half-open; new ones pass
        proxy.add(.suspend(.seconds(3)), direction: .both)   // freeze, then deliver everything, in order
        proxy.add(.latency(.milliseconds(500)).connections(.number(2)), direction: .downstream)  // only the 2nd connection
        print(proxy.connections)                       // number, age, bytes each way, severed by a path switch
        proxy.remove(lag); proxy.removeAll()           // the path heals
        await proxy.stop()
        print(url)
    }
}

private func faultsOnATimeline() async throws {
    try await withDuplexServer(configuration: .init(chaos: true)) { server in
        let scenario = try FaultScenario(steps: [
            .init(at: .seconds(1), .add(.latency(.milliseconds(300)), direction: .downstream, duration: .seconds(2))),
            .init(at: .seconds(4), .chaos("restart?ms=500&amnesia=1")),
        ])
        try await withScenario(scenario, upstreamPort: server.port) { proxy in
            // connect through proxy.port
        }
    }
}

// MARK: - DuplexTesting.docc/TestingYourOwnProtocol.md

@Test("TestingYourOwnProtocol.md: the declared routes serve what they declare")
func declaredRoutes() async throws {
    let feed = ScriptedRoute.webSocket("/feed", script: WebSocketScript(
        subprotocols: ["feed.v1"],
        onConnect: [.send(#"{"type":"hello"}"#)],
        onMessage: [
            ScriptRule(match: try .json(#"{"type":"ping"}"#), do: [.send(#"{"type":"pong"}"#)]),
            ScriptRule(match: .text("bye"), do: [.close(code: 4001, reason: "bye")]),
            ScriptRule(match: .nth(3), do: [.drop]),
        ],
        answerPings: false
    ))
    let orders = ScriptedRoute.sse("/orders", script: SSEScript(
        events: [SSEScriptEvent(id: "1", event: "order", data: #"{"n":1}"#), SSEScriptEvent(id: "2", data: "b")],
        every: .milliseconds(50),
        then: .drop
    ))
    try await withDuplexServer(routes: [feed, orders]) { server in
        let socket = WebSocket(request: WebSocketRequest(url: server.webSocketURL("/feed"), protocols: ["feed.v1"]))
        let messages = socket.messages
        try await socket.connect()
        #expect(socket.negotiatedProtocol == "feed.v1")
        #expect(try await messages.first(within: .seconds(5)) == .string(#"{"type":"hello"}"#))
        try await socket.send(.string(#"{"type":"ping"}"#))
        #expect(try await messages.first(within: .seconds(5)) == .string(#"{"type":"pong"}"#))
        await socket.terminate()

        let sse = ServerSentEventManager(request: SSERequest(url: server.httpURL("/orders")), retryPolicy: .disabled)
        let events = sse.events
        try await sse.connect()
        let ids = try await withTimeout(.seconds(5)) {
            var ids: [String] = []
            for await event in events {
                ids.append(event.id ?? "")
                if ids.count == 2 { break }
            }
            return ids
        }
        #expect(ids == ["1", "2"])
        await sse.terminate()
    }
}

// MARK: - DuplexTesting.docc/UsingTheServerInTests.md

@Test("UsingTheServerInTests.md: waiting on a state, a join and three replies, each with a limit")
func waitingWithATimeLimit() async throws {
    try await withDuplexServer { server in
        let socket = WebSocket(url: server.webSocketURL("/echo"))
        let states = socket.stateEvents  // before connecting: a stream starts when it is asked for
        try await socket.connect()
        let open = try await states.first(within: .seconds(5)) {
            if case .connected = $0 { true } else { false }
        }
        #expect(open == .connected(protocol: nil))

        let chat = ChatClient(url: server.webSocketURL("/chat/lobby"), name: "alice")
        let welcome = try await withTimeout(.seconds(5)) { try await chat.join() }
        #expect(welcome.members == ["alice"])
        await chat.leave()

        let messages = socket.messages  // before the sends, so no reply is missed
        for text in ["a", "b", "c"] { try await socket.send(text) }
        let replies = try await withTimeout(.seconds(5)) {
            var replies: [String] = []
            for await message in messages {
                replies.append(message.text ?? "")
                if replies.count == 3 { break }
            }
            return replies
        }
        #expect(replies == ["a", "b", "c"])
        await socket.terminate()
    }
}
