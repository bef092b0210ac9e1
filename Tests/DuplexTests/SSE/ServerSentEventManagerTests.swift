import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import NIOHTTP1
import Testing
import TestSupport

@Suite("ServerSentEventManager")
struct ServerSentEventManagerTests {
    static let wait: Duration = .seconds(10)
    /// Fast retries for tests: the server's `retry:` is what sets the first delay.
    static let fast = RetryPolicy(initialDelay: 0.02, maxDelay: 0.2, jitter: 0)

    func ids(_ events: [ServerSentEvent]) -> [Int64] { events.compactMap { $0.id.flatMap { Int64($0) } } }

    func take(_ count: Int, from stream: AsyncStream<ServerSentEvent>) async -> [ServerSentEvent] {
        var taken: [ServerSentEvent] = []
        for await event in stream {
            taken.append(event)
            if taken.count == count { break }
        }
        return taken
    }

    @Test("receives the server's ticks; disconnect then connect resumes with Last-Event-ID, exactly")
    func ticksAndResume() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let sse = ServerSentEventManager(url: server.httpURL("/events?interval=20"), retryPolicy: Self.fast)
                let events = sse.events
                try await sse.connect()
                #expect(sse.state == .connected)
                let first = await take(3, from: events)
                #expect(first.allSatisfy { $0.event == "tick" })
                await sse.disconnect()
                await sse.disconnect()  // does nothing
                #expect(sse.state == .disconnected(.manuallyDisconnected))
                // events after the three read may already sit in the stream: the id is at least the last read
                let last = try #require(ids(first).last)
                #expect(try #require(sse.lastEventID.flatMap { Int64($0) }) >= last)
                try await sse.connect()
                let resumed = await take(3, from: events)
                let all = ids(first + resumed)
                #expect(all == Array(all[0]..<(all[0] + 6)), "no gap and no duplicate across the disconnect")
                #expect(sse.serverRetry == .milliseconds(2000))
                await sse.terminate()
            }
        }
    }

    @Test("across an abrupt drop and a clean end from the server: reconnects with Last-Event-ID, no gap, no duplicate")
    func forcedDrops() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(sseRetryMilliseconds: 20)) { server in
                let sse = ServerSentEventManager(url: server.httpURL("/events?interval=20"), retryPolicy: Self.fast)
                let events = sse.events
                let states = sse.stateEvents
                try await sse.connect()
                var received = await take(4, from: events)
                #expect(server.server.dropConnections(.route("events")) == 1)
                let dropped = try await states.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
                guard case .disconnected(.streamError) = dropped else {
                    Issue.record("an abrupt drop is a stream error, got \(dropped)")
                    return
                }
                received += await take(4, from: events)
                _ = try await states.first(within: Self.wait) { $0 == .connected }
                #expect(server.server.closeConnections(.route("events"), code: .goingAway) == 1)
                let ended = try await states.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
                #expect(ended == .disconnected(.streamEnded))
                received += await take(4, from: events)
                let all = ids(received)
                #expect(Set(all).count == all.count, "no duplicate")
                #expect(all == Array(all[0]..<(all[0] + Int64(all.count))), "no gap")
                await sse.terminate()
            }
        }
    }

    @Test("204 stops for good; connect throws noContent")
    func noContent() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { _ in .init(status: .noContent, headers: []) }
            defer { Task { await peer.stop() } }
            let sse = ServerSentEventManager(url: URL(string: "http://127.0.0.1:\(peer.port)/")!, retryPolicy: Self.fast)
            await #expect { try await sse.connect() } throws: { ($0 as? SSEError)?.code == .noContent }
            #expect(
                sse.state
                    == .disconnected(
                        .streamError(SSEError(.noContent, "the server answered 204 No Content: it asks the client to stop", status: 204))))
            #expect(peer.requestHeaders.count == 1)
        }
    }

    @Test("500 and a wrong content type fail without retrying")
    func permanentFailures() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { n in
                n == 1
                    ? .init(status: .internalServerError, headers: [], chunks: ["oops"])
                    : .init(headers: [("Content-Type", "text/plain")], chunks: ["data: x\n\n"])
            }
            defer { Task { await peer.stop() } }
            let url = URL(string: "http://127.0.0.1:\(peer.port)/")!
            let first = ServerSentEventManager(url: url, retryPolicy: Self.fast)
            await #expect { try await first.connect() } throws: { ($0 as? SSEError)?.code == .badStatus && ($0 as? SSEError)?.status == 500 }
            let second = ServerSentEventManager(url: url, retryPolicy: Self.fast)
            await #expect { try await second.connect() } throws: { ($0 as? SSEError)?.code == .badContentType }
            #expect(peer.requestHeaders.count == 2, "one request each: no retry")
        }
    }

    @Test("with retryOnServerErrors, a 503 is retried after Retry-After; the content type's parameters are ignored")
    func retryOnServerErrors() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { n in
                n == 1
                    ? .init(status: .serviceUnavailable, headers: [("Retry-After", "0")])
                    : .init(headers: [("Content-Type", "Text/Event-Stream; charset=utf-8")], chunks: ["data: up\n\n"], stall: true)
            }
            defer { Task { await peer.stop() } }
            let sse = ServerSentEventManager(
                url: URL(string: "http://127.0.0.1:\(peer.port)/")!,
                retryPolicy: Self.fast,
                configuration: .init(retryOnServerErrors: true)
            )
            let events = sse.events
            try await sse.connect()
            #expect(try await events.first(within: Self.wait).data == "up")
            #expect(peer.requestHeaders.count == 2)
            await sse.terminate()
        }
    }

    @Test("the server's retry: sets the reconnection delay; Last-Event-ID and the default headers are sent")
    func retryFieldAndHeaders() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { n in
                n == 1 ? .init(chunks: ["retry: 30\nid: 1\ndata: a\n\n"]) : .init(chunks: ["data: b\n\n"], stall: true)
            }
            defer { Task { await peer.stop() } }
            // with no retry: from the server, the first delay would be 60 s
            let sse = ServerSentEventManager(
                request: SSERequest(url: URL(string: "http://127.0.0.1:\(peer.port)/")!, additionalHeaders: ["Authorization": "Bearer t"]),
                retryPolicy: RetryPolicy(initialDelay: 60, jitter: 0)
            )
            try await sse.connect()
            await peer.waitForRequests(2)
            let (first, second) = (peer.requestHeaders[0], peer.requestHeaders[1])
            #expect(first["Accept"] == ["text/event-stream"] && first["Cache-Control"] == ["no-cache"])
            #expect(first["Authorization"] == ["Bearer t"])
            #expect(first["Last-Event-ID"].isEmpty)
            #expect(second["Last-Event-ID"] == ["1"])
            #expect(sse.serverRetry == .milliseconds(30))
            await sse.terminate()
        }
    }

    @Test("an id containing NUL is ignored; an empty id clears Last-Event-ID; a partial event is dropped")
    func idsAndPartialEvents() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { n in
                switch n {
                case 1: .init(chunks: ["retry: 10\nid: 7\ndata: a\n\nid: 8\u{0}x\ndata: b\n\ndata: part", "ial"])
                case 2: .init(chunks: ["id\ndata: c\n\n"])
                default: .init(chunks: ["data: d\n\n"], stall: true)
                }
            }
            defer { Task { await peer.stop() } }
            let sse = ServerSentEventManager(url: URL(string: "http://127.0.0.1:\(peer.port)/")!, retryPolicy: Self.fast)
            let events = sse.events
            try await sse.connect()
            let received = await take(4, from: events)
            #expect(received.map(\.data) == ["a", "b", "c", "d"], "the partial event of the dropped stream never appears")
            #expect(received.map(\.id) == ["7", "7", nil, nil])
            await peer.waitForRequests(3)
            #expect(peer.requestHeaders[1]["Last-Event-ID"] == ["7"], "the NUL id was ignored")
            #expect(peer.requestHeaders[2]["Last-Event-ID"].isEmpty, "an empty id clears it")
            await sse.terminate()
        }
    }

    @Test("a stream silent for the read timeout counts as dead and reconnects; prepareRequest runs before each attempt")
    func stallAndPrepare() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { n in .init(chunks: ["retry: 10\ndata: \(n)\n\n"], stall: true) }
            defer { Task { await peer.stop() } }
            let sse = ServerSentEventManager(
                url: URL(string: "http://127.0.0.1:\(peer.port)/")!,
                retryPolicy: Self.fast,
                configuration: .init(readTimeout: .milliseconds(300))
            )
            let attempts = NIOLockedValueBox(0)
            sse.prepareRequest = { request in
                var request = request
                let n = attempts.withLockedValue {
                    $0 += 1; return $0
                }
                request.additionalHeaders["Authorization"] = "Bearer token-\(n)"
                return request
            }
            let states = sse.stateEvents
            try await sse.connect()
            let dropped = try await states.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
            guard case .disconnected(.streamError(let error)) = dropped else {
                Issue.record("expected a stream error, got \(dropped)")
                return
            }
            #expect(error.code == .readTimeout)
            await peer.waitForRequests(2)
            // Each attempt that reaches the peer carries a token of its own, in order (under load an
            // attempt can fail before it is sent, so the second may be token-3).
            let tokens = peer.requestHeaders.prefix(2).compactMap { $0["Authorization"].first?.split(separator: "-").last.flatMap { Int($0) } }
            #expect(tokens.count == 2 && tokens[0] == 1 && tokens[1] > tokens[0], "\(peer.requestHeaders)")
            await sse.terminate()
            // a manager can start from a given id
            let resuming = ServerSentEventManager(request: SSERequest(url: URL(string: "http://127.0.0.1:\(peer.port)/")!), lastEventID: "41")
            #expect(resuming.lastEventID == "41")
            try await resuming.connect()
            // Its request is recorded before it is answered. Not necessarily the last one: a
            // request the first manager had on the wire when it was terminated can reach the
            // peer after it.
            #expect(peer.requestHeaders.filter { $0["Last-Event-ID"] == ["41"] }.count == 1, "\(peer.requestHeaders)")
            await resuming.terminate()
        }
    }

    @Test("terminate finishes every stream; connect then throws terminated; retries can be disabled")
    func terminate() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { _ in .init(chunks: ["data: once\n\n"]) }
            defer { Task { await peer.stop() } }
            let url = URL(string: "http://127.0.0.1:\(peer.port)/")!
            let sse = ServerSentEventManager(url: url, retryPolicy: .disabled)
            let events = sse.events
            let states = sse.stateEvents
            try await sse.connect()
            // with retries disabled, the end of the stream is final
            let ended = try await states.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
            #expect(ended == .disconnected(.streamEnded))
            await sse.terminate()
            var received: [String] = []
            for await event in events { received.append(event.data) }
            #expect(received == ["once"])
            await #expect { try await sse.connect() } throws: { ($0 as? SSEError)?.code == .terminated }
            // A string URL never throws at init: connect() reports it.
            let wrongScheme = ServerSentEventManager(url: "ftp://example.com/")
            await #expect { try await wrongScheme.connect() } throws: { ($0 as? SSEError)?.code == .invalidURL }
            let malformed = ServerSentEventManager(url: "http://bad host/")
            await #expect { try await malformed.connect() } throws: {
                ($0 as? SSEError)?.code == .invalidURL && "\($0)".contains("http://bad host/")
            }
        }
    }

    @Test("redirects are followed (307, 302 to another origin, without its credentials); a cycle and a sixth redirect fail with badStatus")
    func redirects() async throws {
        try await withTimeout {
            let heads = NIOLockedValueBox<[String]>([])
            let other = try await RawHTTPPeer.start { head in
                heads.withLockedValue { $0.append(head) }
                return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: arrived\n\n"
            }
            defer { Task { await other.stop() } }
            let port = other.port
            let peer = try await RawHTTPPeer.start { head in
                heads.withLockedValue { $0.append(head) }
                let path = head.split(separator: " ", maxSplits: 2).dropFirst().first.map(String.init) ?? ""
                let location: String =
                    switch path {
                    case "/start": "/next"
                    case "/next": "http://127.0.0.1:\(port)/elsewhere"
                    case "/loop": "/loop"
                    default: "/hop\((Int(path.dropFirst(4)) ?? 0) + 1)"
                    }
                let status = path == "/next" ? "302 Found" : "307 Temporary Redirect"
                return "HTTP/1.1 \(status)\r\nLocation: \(location)\r\nContent-Length: 0\r\n\r\n"
            }
            defer { Task { await peer.stop() } }
            let request = SSERequest(url: URL(string: "http://127.0.0.1:\(peer.port)/start")!, additionalHeaders: ["Authorization": "Bearer secret"])
            let sse = ServerSentEventManager(request: request, retryPolicy: .disabled)
            let events = sse.events
            try await sse.connect()
            #expect(try await events.first(within: Self.wait).data == "arrived")
            await sse.terminate()
            let seen = heads.withLockedValue { $0 }
            #expect(
                seen.map { $0.components(separatedBy: "\r\n").first ?? "" } == [
                    "GET /start HTTP/1.1", "GET /next HTTP/1.1", "GET /elsewhere HTTP/1.1",
                ])
            #expect(seen[1].contains("Authorization: Bearer secret"), "the same origin keeps the credentials")
            #expect(!seen[2].contains("Authorization"), "another origin does not get them")
            #expect(seen[2].contains("Host: 127.0.0.1:\(port)"))

            for (path, words) in [("/loop", "cycle"), ("/hop1", "more than 5")] {
                let failing = ServerSentEventManager(url: URL(string: "http://127.0.0.1:\(peer.port)\(path)")!, retryPolicy: .disabled)
                await #expect {
                    try await failing.connect()
                } throws: { error in
                    guard let error = error as? SSEError else { return false }
                    return error.code == .badStatus && error.status == 307 && error.message.contains(words)
                }
            }
        }
    }

    @Test("terminate during a request the server never answers returns at once, long before the connect timeout")
    func terminateWhileConnecting() async throws {
        let (requests, arrived) = AsyncStream<Void>.makeStream()
        let peer = try await RawHTTPPeer.start { _ in
            arrived.yield()
            return ""
        }
        defer { Task { await peer.stop() } }
        let sse = ServerSentEventManager(
            url: URL(string: "http://127.0.0.1:\(peer.port)/")!,
            configuration: SSEConfiguration(connectTimeout: .seconds(60))
        )
        let states = sse.stateEvents
        let connecting = Task { try await sse.connect() }
        _ = try await states.first(within: Self.wait) { $0 == .connecting }
        // Wait on the request reaching the peer, so the attempt is past the TCP connection.
        try await requests.first(within: Self.wait)
        try await withTimeout(.seconds(5)) { await sse.terminate() }
        await #expect { try await connecting.value } throws: { ($0 as? SSEError)?.code == .terminated }
    }

    @Test("a reader that is behind holds the body back without tripping the read timeout: nothing is lost, the stream stays open")
    func slowReaderIsNotSilence() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                // Ticks every 20 ms; the read timeout is 500 ms; the reader stops for 3 s with
                // room for 2 events only.
                var configuration = SSEConfiguration(readTimeout: .milliseconds(500))
                configuration.streamBufferLimit = 2
                let sse = ServerSentEventManager(url: server.httpURL("/events?interval=20"), retryPolicy: .disabled, configuration: configuration)
                let events = sse.events
                let states = sse.stateEvents
                try await sse.connect()
                // The reader stays away while a second client, reading the same 20 ms ticks,
                // gets 150 of them: three seconds of the server's own time, six read timeouts.
                let metronome = ServerSentEventManager(url: server.httpURL("/events?interval=20"), retryPolicy: .disabled)
                let beats = metronome.events
                try await metronome.connect()
                var beat = 0
                for await _ in beats {
                    beat += 1
                    if beat == 150 { break }
                }
                await metronome.terminate()
                #expect(beat == 150)
                #expect(sse.state == .connected, "the stream stayed open while the reader was away")
                // Bounded on its own, so that a stream that stopped says how (its state) instead
                // of waiting out the test's limit.
                let received = NIOLockedValueBox<[ServerSentEvent]>([])
                _ = try? await withTimeout(Self.wait) {
                    for await event in events {
                        let count = received.withLockedValue { taken in
                            taken.append(event)
                            return taken.count
                        }
                        if count == 100 { break }
                    }
                }
                let ids = ids(received.withLockedValue { $0 })
                #expect(ids.count == 100 && zip(ids, ids.dropFirst()).allSatisfy { $1 == $0 + 1 }, "\(ids); the stream is \(sse.state)")
                await sse.terminate()
                var seen: [SSEState] = []
                for await state in states { seen.append(state) }
                #expect(!seen.contains { if case .disconnected(.streamError) = $0 { true } else { false } }, "\(seen)")
            }
        }
    }

    @Test(
        "a request header that would split the request (CR LF in a value, a space in a name) is refused before connecting, by SSE and WebSocket alike; nothing reaches the server"
    )
    func invalidHeaders() async throws {
        try await withTimeout {
            let requests = NIOLockedValueBox(0)
            let peer = try await RawHTTPPeer.start { _ in
                requests.withLockedValue { $0 += 1 }
                return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
            }
            defer { Task { await peer.stop() } }
            for (headers, words) in [(["X-Note": "a\r\nInjected: yes"], "control character"), (["X Note": "a"], "not an HTTP token")] {
                let sse = ServerSentEventManager(request: SSERequest(url: URL(string: "http://127.0.0.1:\(peer.port)/")!, additionalHeaders: headers))
                await #expect {
                    try await sse.connect()
                } throws: { error in
                    guard let error = error as? SSEError else { return false }
                    return error.code == .invalidHeader && error.message.contains(words)
                }
                await sse.terminate()
                let socket = WebSocket(request: WebSocketRequest(url: URL(string: "ws://127.0.0.1:\(peer.port)/")!, additionalHeaders: headers))
                await #expect {
                    try await socket.connect()
                } throws: { error in
                    guard let error = error as? WebSocketError else { return false }
                    return error.code == .invalidHeader && error.message.contains(words)
                }
                await socket.terminate()
            }
            #expect(requests.withLockedValue { $0 } == 0, "nothing was sent")
        }
    }
}
