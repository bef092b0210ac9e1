import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Synchronization
import Testing

/// The Duplex clients against scripted routes of a protocol that is not Duplex's own: the seeds'
/// reconnect, ping-failure and close semantics, Retry-After on a refused reconnect, frame faults
/// and their close codes, SSE resumption across a cut event, and a streaming POST.
@Suite("Clients against scripted routes")
struct ScriptedProtocolTests {
    struct Feed: Codable, Sendable, Equatable {
        var type: String
        var n: Int?
    }

    @Test("a feed protocol: hello, a snapshot and a push, a drop after the second reply, a 429 with Retry-After, then withheld pongs")
    func feedProtocol() async throws {
        let upgrades = Mutex(0)
        let served = Mutex(0)
        let feed = ScriptedRoute.webSocket("/feed", subprotocols: ["feed.v1"]) { socket in
            // The third connection served withholds its pongs.
            if served.withLock({
                $0 += 1; return $0
            }) == 2 {
                socket.answerPings = false
            }
            try socket.send(json: Feed(type: "hello"))
        } onMessage: { message, socket in
            switch try message.decode(Feed.self).type {
            case "subscribe":
                try socket.send(json: Feed(type: "snapshot", n: 1))
                try socket.send(json: Feed(type: "update", n: 2))
            case "ack":
                try socket.send(json: Feed(type: "ok"))
                try socket.drop()
            default:
                try socket.close(code: 4400, reason: "unknown type")
            }
        } accept: { _ in
            upgrades.withLock {
                $0 += 1; return $0
            } == 2 ? .refuse(status: 429, headers: ["Retry-After": "1"]) : .accept
        }
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: [feed]) { server in
                let socket = WebSocket(
                    request: WebSocketRequest(url: server.webSocketURL("/feed"), protocols: ["feed.v1"]),
                    configuration: .init(
                        ping: PingConfig(pingInterval: .seconds(1), maxPingFailures: 2),
                        reconnection: ReconnectionStrategy(initialDelay: .milliseconds(20), maxDelay: .seconds(5), backoffMultiplier: 1, jitter: 0)
                    )
                )
                let channel = WebSocketCodableChannel<Feed, Feed>(socket: socket)
                let states = socket.stateEvents
                var frames = channel.receive().makeAsyncIterator()
                try await channel.connect()
                #expect(socket.negotiatedProtocol == "feed.v1")
                #expect(try await frames.next() == Feed(type: "hello"))
                try await channel.sendMessage(Feed(type: "subscribe"))
                #expect(try await frames.next() == Feed(type: "snapshot", n: 1))
                #expect(try await frames.next() == Feed(type: "update", n: 2))
                try await channel.sendMessage(Feed(type: "ack"))
                #expect(try await frames.next() == Feed(type: "ok"))
                // Dropped; the reconnect is refused with 429, retried after its Retry-After.
                #expect(try await frames.next() == Feed(type: "hello"))
                let failed = try await states.first(within: .seconds(20)) { if case .disconnected(.pingFailed) = $0 { true } else { false } }
                #expect(failed == .disconnected(.pingFailed(missedPings: 2)))
                await socket.terminate()

                let journal = server.journal.entries
                #expect(
                    journal.filter { $0.direction == .in && $0.kind == .text }.compactMap(\.data).prefix(2) == [
                        #"{"type":"subscribe"}"#, #"{"type":"ack"}"#,
                    ])
                let refused = try #require(journal.first { $0.kind == .refused })
                #expect(refused.code == 429)
                let next = try #require(journal.first { $0.kind == .open && $0.at > refused.at })
                #expect(next.at.timeIntervalSince(refused.at) >= 0.9, "the reconnect waited for Retry-After: 1")
                #expect(journal.contains { $0.kind == .drop && $0.direction == .out })
                #expect(journal.contains { $0.kind == .ping && $0.direction == .in && $0.connection == next.connection })
            }
        }
    }

    @Test("each frame fault fails the client's connection with the close code RFC 6455 gives it", arguments: FrameFault.allCases)
    func frameFault(_ fault: FrameFault) async throws {
        let route = ScriptedRoute.webSocket("/bad") { socket in try socket.send(fault) }
        try await withTimeout {
            try await withDuplexServer(routes: [route]) { server in
                let socket = WebSocket(url: server.webSocketURL("/bad"))
                let states = socket.stateEvents
                try await socket.connect()
                _ = try await states.first(within: .seconds(10)) { if case .disconnected = $0 { true } else { false } }
                let closed = try await server.journal.first(within: .seconds(10)) { $0.kind == .close && $0.direction == .in }
                #expect(closed.code == Int(fault.expectedCloseCode))
                let sent = server.journal.entries.filter { $0.direction == .out && $0.kind == .fault }
                #expect(sent.map(\.data) == [fault.rawValue], "journaled as a fault of its own kind, named")
                #expect(sent.first?.code == Int(fault.expectedCloseCode))
                #expect(!server.journal.entries.contains { $0.kind == .error }, "an error is a handler that threw, not a fault sent")
            }
        }
    }

    @Test("an SSE stream cut in the middle of an event resumes from its Last-Event-ID, losing nothing")
    func sseResumesAcrossCut() async throws {
        let events = (1...4).map { SSEScriptEvent(id: "\($0)", event: "order", data: #"{"n":\#($0)}"#) }
        let orders = ScriptedRoute.sse("/orders") { request in
            request.lastEventID == nil
                ? SSEScript(events: Array(events.prefix(2)) + [.raw("id: 3\ndata: {\"n\":")], then: .drop)
                : SSEScript(events: events, every: .milliseconds(5), then: .end)
        }
        try await withTimeout {
            try await withDuplexServer(routes: [orders]) { server in
                let sse = ServerSentEventManager(
                    request: SSERequest(url: server.httpURL("/orders")),
                    retryPolicy: RetryPolicy(initialDelay: 0.02, maxDelay: 0.2, jitter: 0)
                )
                let stream = sse.events
                try await sse.connect()
                var received: [String] = []
                for await event in stream {
                    received.append(event.data)
                    if received.count == 4 { break }
                }
                #expect(received == (1...4).map { #"{"n":\#($0)}"# })
                await sse.terminate()
                let opens = server.journal.entries.filter { $0.kind == .open }
                #expect(opens.map { $0.request?.lastEventID } == [nil, "2"])
            }
        }
    }

    @Test("an SSE script is written by DuplexSchema's encoder: CR in data splits lines, a field that would inject another is refused")
    func sseFieldsAreEncoded() async throws {
        let lines = ScriptedRoute.sse("/lines", script: SSEScript(events: [SSEScriptEvent(id: "1", data: "a\rb")]))
        let injecting = ScriptedRoute.sse("/inject") { _ in SSEScript(events: [SSEScriptEvent(id: "1\nevent: admin", data: "x")]) }
        try await withTimeout {
            try await withDuplexServer(routes: [lines, injecting]) { server in
                let sse = ServerSentEventManager(request: SSERequest(url: server.httpURL("/lines")), retryPolicy: .disabled)
                let events = sse.events
                try await sse.connect()
                let event = try await events.first(within: .seconds(5))
                #expect(event.data == "a\nb" && event.id == "1")
                await sse.terminate()
                let refused = ServerSentEventManager(request: SSERequest(url: server.httpURL("/inject")), retryPolicy: .disabled)
                await #expect { try await refused.connect() } throws: { ($0 as? SSEError)?.status == 500 }
                await refused.terminate()
                let error = try await server.journal.first(within: .seconds(5)) { $0.kind == .error }
                #expect(error.data?.contains("events[0]") == true)
            }
        }
        let declared = ScriptedRoute.sse("/bad", script: SSEScript(events: [SSEScriptEvent(event: "a\rb", data: "x")]))
        await #expect(throws: DuplexServerError.self) { try await withDuplexServer(routes: [declared]) { _ in } }
    }

    @Test("a streaming POST route reads the body, streams tokens and [DONE], and journals the body")
    func streamingPost() async throws {
        struct Prompt: Codable, Sendable { var prompt: String }
        struct Chunk: Codable, Sendable, Equatable { var text: String }
        let completions = ScriptedRoute.sse("/v1/completions", method: "POST") { request in
            let prompt = (try? JSONDecoder().decode(Prompt.self, from: Data((request.body ?? "").utf8)))?.prompt ?? ""
            let tokens = prompt.split(separator: " ").map { SSEScriptEvent(data: #"{"text":"\#($0)"}"#) }
            return SSEScript(events: tokens + [SSEScriptEvent(data: "[DONE]")], then: .hang)
        }
        try await withTimeout {
            try await withDuplexServer(routes: [completions]) { server in
                let request = try SSERequest(url: server.httpURL("/v1/completions"), json: Prompt(prompt: "say hi twice"), terminalEvent: .done)
                let sse = ServerSentEventManager(request: request)
                let chunks = sse.events(decoding: Chunk.self)
                try await sse.connect()
                var texts: [String] = []
                for try await chunk in chunks { texts.append(chunk.text) }
                #expect(texts == ["say", "hi", "twice"])
                #expect(sse.hasFinished)
                let open = try await server.journal.first(within: .seconds(5)) { $0.kind == .open }
                #expect(open.request?.method == "POST")
                #expect(open.request?.body == #"{"prompt":"say hi twice"}"#)
            }
        }
    }

    @Test(
        "over TLS and HTTP/2: a scripted WebSocket (RFC 8441) refuses with 429 then serves, and a POST stream reads its body",
        arguments: [HTTPVersionPreference.http2, .http1])
    func overTLS(_ version: HTTPVersionPreference) async throws {
        let upgrades = Mutex(0)
        let feed = ScriptedRoute.webSocket("/feed") { socket in
            try socket.send("hello")
        } onMessage: { message, socket in
            try socket.send("got \(message.text ?? "")")
            try socket.drop()
        } accept: { _ in
            upgrades.withLock {
                $0 += 1; return $0
            } == 1 ? .refuse(status: 429, headers: ["Retry-After": "0"]) : .accept
        }
        let echoBody = ScriptedRoute.sse("/body", method: "POST") { request in
            SSEScript(events: [SSEScriptEvent(data: request.body ?? "none"), SSEScriptEvent(data: "[DONE]")], then: .hang)
        }
        var tls = DuplexServerConfiguration(port: 0)
        tls.tls = try .selfSigned()
        let configuration = tls
        let trust = TLSTrust.certificateAuthority(pem: configuration.tls!.certificateAuthorityPEM!)
        try await withTimeout {
            try await withDuplexServer(configuration: configuration, routes: [feed, echoBody]) { server in
                var client = WebSocketConfiguration(tlsTrust: trust)
                client.httpVersion = version
                let refused = WebSocket(url: server.webSocketURL("/feed"), configuration: client)
                await #expect(throws: WebSocketError.self) { try await refused.connect() }
                let socket = WebSocket(url: server.webSocketURL("/feed"), configuration: client)
                let messages = socket.messages
                try await socket.connect()
                var iterator = messages.makeAsyncIterator()
                #expect(await iterator.next() == .string("hello"))
                try await socket.send(.string("x"))
                let reply = await iterator.next()
                #expect(reply == .string("got x"))
                let drop = try await server.journal.first(within: .seconds(10)) { $0.kind == .drop }
                #expect(drop.direction == .out)
                await socket.terminate()

                var sseClient = SSEConfiguration(tlsTrust: trust)
                sseClient.httpVersion = version
                let sse = ServerSentEventManager(
                    request: SSERequest(url: server.httpURL("/body"), method: .post, body: Data("prompt".utf8), terminalEvent: .done),
                    configuration: sseClient
                )
                let events = sse.events
                try await sse.connect()
                var received: [String] = []
                for await event in events { received.append(event.data) }
                #expect(received == ["prompt", "[DONE]"])
                let opens = server.journal.entries.filter { $0.kind == .open }
                #expect(opens.map { $0.request?.method } == [version == .http2 ? "CONNECT" : "GET", "POST"])
                #expect(server.journal.entries.first { $0.kind == .refused }?.code == 429)
            }
        }
    }
}
