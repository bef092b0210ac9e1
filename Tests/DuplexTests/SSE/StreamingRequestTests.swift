import Duplex
import DuplexSchema
import DuplexTesting
import Foundation
import NIOHTTP1
import Testing
import TestSupport

/// SSE for streaming APIs: a request with a method and a body, answered once; a terminal event
/// that finishes it; errors with the server's body; typed events. Against a scripted HTTP peer
/// that records every request it gets.
@Suite("SSE streaming requests")
struct StreamingRequestTests {
    static let fast = RetryPolicy(initialDelay: 0.02, maxDelay: 0.2, jitter: 0)

    struct Prompt: Codable, Equatable {
        var prompt: String
    }

    struct Token: Codable, Equatable {
        var text: String
    }

    static func url(_ peer: ScriptedHTTPPeer, _ path: String = "/v1/complete") -> URL {
        URL(string: "http://127.0.0.1:\(peer.port)\(path)")!
    }

    static func token(_ text: String, id: String? = nil) -> String {
        (id.map { "id: \($0)\n" } ?? "") + "data: {\"text\":\"\(text)\"}\n\n"
    }

    /// Every state until the state stream ends: the manager is over for good.
    static func allStates(_ states: AsyncStream<SSEState>) async -> [SSEState] {
        var seen: [SSEState] = []
        for await state in states { seen.append(state) }
        return seen
    }

    @Test("a POST with a JSON body streams typed events; [DONE] finishes it: every stream ends, no reconnection, connect() throws finished")
    func postFinishesAtDone() async throws {
        try await withTimeout {
            // The server keeps the connection open after [DONE]: the client ends it by itself.
            let peer = try await ScriptedHTTPPeer.start { _ in
                .init(chunks: [Self.token("Hel"), ": a comment\n\n" + Self.token("lo"), "data: [DONE]\n\n"], stall: true)
            }
            defer { Task { await peer.stop() } }
            let request = try SSERequest(
                url: Self.url(peer),
                json: Prompt(prompt: "hi"),
                additionalHeaders: ["Authorization": "Bearer t"],
                terminalEvent: .done
            )
            #expect(request.method == .post && !request.isResumable)
            let sse = ServerSentEventManager(request: request, retryPolicy: Self.fast)
            let tokens = sse.events(decoding: Token.self)
            let events = sse.events
            let states = sse.stateEvents
            try await sse.connect()
            var texts: [String] = []
            for try await token in tokens { texts.append(token.text) }
            #expect(texts == ["Hel", "lo"], "the terminal event is not decoded")
            var raw: [String] = []
            for await event in events { raw.append(event.data) }
            #expect(raw.last == "[DONE]", "the terminal event is delivered as the last event")
            #expect(await Self.allStates(states) == [.notConnected, .connecting, .connected, .disconnected(.streamEnded)])
            #expect(sse.hasFinished)
            await #expect { try await sse.connect() } throws: { ($0 as? SSEError)?.code == .finished }
            let sent = try #require(peer.received.only)
            #expect(sent.method == .POST)
            #expect(sent.uri == "/v1/complete")
            #expect(sent.body == #"{"prompt":"hi"}"#)
            #expect(sent.headers["Content-Type"] == ["application/json"])
            #expect(sent.headers["Content-Length"] == ["15"])
            #expect(sent.headers["Authorization"] == ["Bearer t"])
            #expect(sent.headers["Accept"] == ["text/event-stream"])
        }
    }

    @Test("a POST stream that drops after the answer is never sent again: the typed stream throws the drop, not a finish")
    func postDropIsNotResent() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { _ in .init(chunks: [Self.token("a", id: "1")], drop: true) }
            defer { Task { await peer.stop() } }
            let sse = ServerSentEventManager(request: SSERequest(url: Self.url(peer), method: .post, body: Data("{}".utf8)), retryPolicy: Self.fast)
            let tokens = sse.events(decoding: Token.self)
            let states = sse.stateEvents
            try await sse.connect()
            let (received, thrown) = await drain(tokens)
            #expect(received.map(\.text) == ["a"])
            #expect((thrown as? SSEError)?.code == .connectionFailed, "the typed stream throws the drop: \(String(describing: thrown))")
            // The state stream ends: nothing can start another attempt. It held no second one.
            let seen = await Self.allStates(states)
            #expect(seen.filter { $0 == .connecting }.count == 1, "connecting once: \(seen)")
            guard case .disconnected(.streamError(let error))? = seen.last else {
                Issue.record("a drop is a stream error, not an end: \(seen)")
                return
            }
            #expect(error.code == .connectionFailed)
            #expect(!sse.hasFinished, "a drop is not a finish")
            #expect(peer.received.count == 1, "a POST answered once is never sent again")
        }
    }

    @Test("a clean end of a POST stream is its finish: not reopened, the typed stream ends without error")
    func postCleanEndFinishes() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { _ in .init(chunks: [Self.token("only")]) }
            defer { Task { await peer.stop() } }
            let sse = ServerSentEventManager(request: SSERequest(url: Self.url(peer), method: .put, body: Data("x".utf8)), retryPolicy: Self.fast)
            let tokens = sse.events(decoding: Token.self)
            try await sse.connect()
            var texts: [String] = []
            for try await token in tokens { texts.append(token.text) }
            #expect(texts == ["only"])
            #expect(sse.hasFinished)
            #expect(sse.state == .disconnected(.streamEnded))
            #expect(peer.received.map(\.method) == [.PUT])
        }
    }

    @Test("an opted-in POST (isResumable) is sent again after a drop, with its body and Last-Event-ID, and finishes at its terminal event")
    func resumablePostIsResent() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { n in
                n == 1
                    ? .init(chunks: [Self.token("a", id: "1")], drop: true)
                    : .init(chunks: [Self.token("b", id: "2"), "event: end\ndata: bye\n\n", Self.token("never")], stall: true)
            }
            defer { Task { await peer.stop() } }
            var request = try SSERequest(url: Self.url(peer), json: Prompt(prompt: "again"), terminalEvent: .event("end"))
            request.isResumable = true
            let sse = ServerSentEventManager(request: request, retryPolicy: Self.fast)
            let tokens = sse.events(decoding: Token.self)
            try await sse.connect()
            var texts: [String] = []
            for try await token in tokens { texts.append(token.text) }
            #expect(texts == ["a", "b"], "nothing after the terminal event")
            #expect(sse.hasFinished)
            let sent = peer.received
            try #require(sent.count == 2)
            #expect(sent[1].method == .POST)
            #expect(sent[1].body == #"{"prompt":"again"}"#)
            #expect(sent[1].headers["Last-Event-ID"] == ["1"])
            #expect(sent[0].headers["Last-Event-ID"].isEmpty)
        }
    }

    @Test("a GET stream finishes at its terminal event too, without reconnecting")
    func getFinishesAtTerminalEvent() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { _ in .init(chunks: ["id: 1\ndata: one\n\n", "id: 2\ndata: [DONE]\n\n"], stall: true) }
            defer { Task { await peer.stop() } }
            let sse = ServerSentEventManager(request: SSERequest(url: Self.url(peer, "/feed"), terminalEvent: .done), retryPolicy: Self.fast)
            let events = sse.events
            try await sse.connect()
            var data: [String] = []
            for await event in events { data.append(event.data) }
            #expect(data == ["one", "[DONE]"])
            #expect(sse.hasFinished)
            #expect(peer.received.map(\.method) == [.GET])
            #expect(peer.received.first?.headers["Content-Length"].isEmpty == true, "a GET sends no body and no Content-Length")
        }
    }

    @Test("a refusal carries the server's answer: 429 with Retry-After and a JSON error, bounded at 64 KiB for a longer body")
    func refusalWithBody() async throws {
        try await withTimeout {
            let long = String(repeating: "x", count: 100_000)
            let peer = try await ScriptedHTTPPeer.start { n in
                n == 1
                    ? .init(
                        status: .tooManyRequests, headers: [("Retry-After", "3"), ("Content-Type", "application/json")],
                        chunks: ["{\"error\":{\"message\":\"slow down\u{1b}[31m\"}}"])
                    : .init(status: .badRequest, headers: [("Content-Type", "text/plain")], chunks: [long])
            }
            defer { Task { await peer.stop() } }
            let busy = ServerSentEventManager(request: SSERequest(url: Self.url(peer), method: .post, body: Data("{}".utf8)), retryPolicy: Self.fast)
            let events = busy.events
            let error = await #expect(throws: SSEError.self) { try await busy.connect() }
            #expect(error?.code == .badStatus)
            #expect(error?.status == 429)
            let response = try #require(error?.response)
            #expect(response.retryAfter == "3")
            #expect(response.contentType == "application/json")
            #expect(response.text.contains("slow down"))
            #expect(!response.bodyTruncated)
            #expect(error?.message.contains("slow down") == true, "the message quotes the body: \(error?.message ?? "")")
            #expect(error?.message.contains("\u{1b}") == false, "the body's control characters are escaped in the message")
            for await _ in events {}  // a refused request that is not resumable is over: its streams end
            #expect(peer.received.count == 1, "without retryOnServerErrors, not retried")

            let bad = ServerSentEventManager(request: SSERequest(url: Self.url(peer), method: .post), retryPolicy: Self.fast)
            let refused = await #expect(throws: SSEError.self) { try await bad.connect() }
            #expect(refused?.status == 400)
            #expect(refused?.response?.body.count == SSEErrorResponse.bodyLimit)
            #expect(refused?.response?.bodyTruncated == true)
            #expect((refused?.message.count ?? .max) < 400, "the message holds an excerpt only")
        }
    }

    @Test("with retryOnServerErrors, a POST refused with 503 is sent again after Retry-After (the server did not act on it); a 500 is not")
    func postRetriesOnlyUnprocessed() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { n in
                switch n {
                case 1: .init(status: .serviceUnavailable, headers: [("Retry-After", "0")])
                case 2: .init(chunks: [Self.token("ok"), "data: [DONE]\n\n"])
                default: .init(status: .internalServerError, headers: [], chunks: ["boom"])
                }
            }
            defer { Task { await peer.stop() } }
            let retrying = SSEConfiguration(retryOnServerErrors: true)
            let request = SSERequest(url: Self.url(peer), method: .post, body: Data("{}".utf8), terminalEvent: .done)
            let sse = ServerSentEventManager(request: request, retryPolicy: Self.fast, configuration: retrying)
            let tokens = sse.events(decoding: Token.self)
            try await sse.connect()
            var texts: [String] = []
            for try await token in tokens { texts.append(token.text) }
            #expect(texts == ["ok"])
            #expect(peer.received.count == 2)

            let failing = ServerSentEventManager(request: request, retryPolicy: Self.fast, configuration: retrying)
            let error = await #expect(throws: SSEError.self) { try await failing.connect() }
            #expect(error?.status == 500)
            #expect(error?.response?.text == "boom")
            #expect(peer.received.count == 3, "a 500 to a POST may have acted on it: not sent again")
        }
    }

    @Test("redirects: a 307 sends the POST again with its body; a 303 turns it into a GET without body headers")
    func redirectsKeepOrDropTheBody() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { n in
                switch n {
                case 1: .init(status: .temporaryRedirect, headers: [("Location", "/kept")])
                case 3: .init(status: .seeOther, headers: [("Location", "/fetched")])
                default: .init(chunks: ["data: [DONE]\n\n"])
                }
            }
            defer { Task { await peer.stop() } }
            for _ in 1...2 {
                let request = try SSERequest(url: Self.url(peer), json: Prompt(prompt: "p"), terminalEvent: .done)
                let sse = ServerSentEventManager(request: request, retryPolicy: Self.fast)
                let events = sse.events
                try await sse.connect()
                for await _ in events {}
                #expect(sse.hasFinished)
            }
            let sent = peer.received
            try #require(sent.count == 4)
            #expect(sent[1].method == .POST && sent[1].uri == "/kept" && sent[1].body == #"{"prompt":"p"}"#)
            #expect(sent[3].method == .GET && sent[3].uri == "/fetched" && sent[3].body.isEmpty)
            #expect(sent[3].headers["Content-Type"].isEmpty && sent[3].headers["Content-Length"].isEmpty)
        }
    }

    @Test("a request that cannot be sent is refused before connecting: a GET with a body, a method that is not a token, HEAD")
    func invalidRequests() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { _ in .init() }
            defer { Task { await peer.stop() } }
            let requests = [
                SSERequest(url: Self.url(peer), body: Data("x".utf8)),
                SSERequest(url: Self.url(peer), method: SSERequest.Method("PO ST")),
                SSERequest(url: Self.url(peer), method: SSERequest.Method("HEAD")),
            ]
            for request in requests {
                let sse = ServerSentEventManager(request: request, retryPolicy: Self.fast)
                await #expect { try await sse.connect() } throws: { ($0 as? SSEError)?.code == .invalidRequest }
            }
            #expect(peer.received.isEmpty)
        }
    }

    @Test("typed events: an event that is not the type ends the stream with SSEDecodingError holding the event; decode works per event")
    func typedDecoding() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { _ in .init(chunks: [Self.token("fine"), "id: 7\ndata: not json\n\n"], stall: true) }
            defer { Task { await peer.stop() } }
            let sse = ServerSentEventManager(request: SSERequest(url: Self.url(peer), method: .post), retryPolicy: Self.fast)
            let tokens = sse.events(decoding: Token.self)
            try await sse.connect()
            var texts: [String] = []
            let error = await #expect(throws: SSEDecodingError.self) {
                for try await token in tokens { texts.append(token.text) }
            }
            #expect(texts == ["fine"])
            #expect(error?.event == ServerSentEvent(id: "7", event: "message", data: "not json"))
            #expect(error?.type == "Token")
            #expect(error?.description.contains("not json") == true)
            await sse.terminate()
            #expect(try ServerSentEvent(data: #"{"text":"t"}"#).decode(Token.self) == Token(text: "t"))
            #expect(throws: SSEDecodingError.self) { try ServerSentEvent(data: "[DONE]").decode(Token.self) }
        }
    }
}

extension Array {
    /// The one element, or nil when there are none or several.
    fileprivate var only: Element? { count == 1 ? first : nil }
}
