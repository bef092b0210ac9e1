import Duplex
import DuplexSchema
import DuplexTesting
import Foundation
import Testing

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// The SSE client against a third-party server: Python aiohttp (Tests/Interop/sse_server.py),
/// which `.ci/run` starts and names in DUPLEX_INTEROP_SSE_URL. Skipped when that is not set.
/// Its `/v1/…` routes stream as a completions API does: a JSON body in, `data: [DONE]` at the
/// end, 429 with `Retry-After` and 400 with a JSON error, and a request counter.
@Suite("interop with a Python aiohttp SSE server", .enabled(if: ProcessInfo.processInfo.environment["DUPLEX_INTEROP_SSE_URL"] != nil))
struct PythonSSEInteropTests {
    @Test("events across several server-closed responses arrive exactly once, in order, with multi-line data")
    func resumesAcrossResponses() async throws {
        let base = try #require(ProcessInfo.processInfo.environment["DUPLEX_INTEROP_SSE_URL"])
        try await withTimeout {
            let sse = ServerSentEventManager(url: base + "/stream", retryPolicy: RetryPolicy(initialDelay: 5, jitter: 0))
            let events = sse.events
            try await sse.connect()
            var received: [ServerSentEvent] = []
            for await event in events {
                received.append(event)
                if received.count == 10 { break }
            }
            #expect(
                received.compactMap(\.id) == (1...10).map(String.init), "every response ends after 3 events; the client resumes with Last-Event-ID")
            // A timeout ends the loop early: fail, never index past the end.
            try #require(received.count == 10)
            #expect(received[4] == ServerSentEvent(id: "5", event: "multi", data: "line one\nline two 5"))
            #expect(sse.serverRetry == .milliseconds(50))
            await sse.terminate()
        }
    }

    struct Prompt: Encodable {
        var prompt: String
    }

    struct Token: Decodable, Sendable {
        var text: String
    }

    struct APIError: Decodable {
        struct Detail: Decodable {
            var message: String
            var type: String
        }
        var error: Detail
    }

    static var base: String { ProcessInfo.processInfo.environment["DUPLEX_INTEROP_SSE_URL"] ?? "" }

    @Test("a completion: a POST with a JSON body, typed tokens, finished by [DONE]")
    func completion() async throws {
        try await withTimeout {
            let request = try SSERequest(url: URL(string: Self.base + "/v1/completions")!, json: Prompt(prompt: "hi there"), terminalEvent: .done)
            let sse = ServerSentEventManager(request: request)
            let tokens = sse.events(decoding: Token.self)
            try await sse.connect()
            var text = ""
            for try await token in tokens { text += token.text }
            #expect(text == "you said: hi there ")
            #expect(sse.hasFinished)
        }
    }

    @Test("the API's errors reach the caller: 429 with Retry-After and 400, each with its JSON body")
    func apiErrors() async throws {
        try await withTimeout {
            let busy = ServerSentEventManager(request: try SSERequest(url: URL(string: Self.base + "/v1/completions")!, json: Prompt(prompt: "busy")))
            let error = await #expect(throws: SSEError.self) { try await busy.connect() }
            #expect(error?.status == 429)
            #expect(error?.response?.retryAfter == "1")
            let detail = try JSONDecoder().decode(APIError.self, from: try #require(error?.response?.body))
            #expect(detail.error.type == "rate_limit_error")

            let wrong = ServerSentEventManager(
                request: SSERequest(url: URL(string: Self.base + "/v1/completions")!, method: .post, body: Data("{}".utf8)))
            let refused = await #expect(throws: SSEError.self) { try await wrong.connect() }
            #expect(refused?.status == 400)
            #expect(refused?.response?.text.contains("invalid_request_error") == true)
        }
    }

    @Test("a POST whose stream drops after the answer is not sent again: the server counts one request")
    func dropIsNotResent() async throws {
        try await withTimeout {
            let key = UUID().uuidString
            let sse = ServerSentEventManager(
                request: SSERequest(url: URL(string: Self.base + "/v1/drop?key=\(key)")!, method: .post, body: Data("{}".utf8)),
                retryPolicy: RetryPolicy(initialDelay: 0.01, jitter: 0)
            )
            let tokens = sse.events(decoding: Token.self)
            let states = sse.stateEvents
            try await sse.connect()
            let (received, thrown) = await drain(tokens)
            #expect(received.map(\.text) == ["partial "])
            #expect((thrown as? SSEError)?.code == .connectionFailed, "the typed stream throws the drop: \(String(describing: thrown))")
            for await _ in states {}  // over for good: no attempt can follow
            let (count, _) = try await URLSession.shared.data(from: URL(string: Self.base + "/v1/count?key=\(key)")!)
            #expect(String(decoding: count, as: UTF8.self) == "1")
        }
    }
}
