import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Testing
import TestSupport

/// SSE proxy routes in front of a real backend's stream (another server in this process): the
/// request's method, headers, `Last-Event-ID` and body go upstream; the `toClient` rules apply
/// per event, keeping ids; refusals pass through; an unreachable upstream is 502.
@Suite("SSE proxy routes")
struct ProxyStreamTests {
    /// The backend: four events with ids, resumable; a POST route that streams its body back;
    /// a route that refuses with 403 and a body; an event of two-byte characters.
    static let backend: [ScriptedRoute] = [
        .sse("/accents", script: SSEScript(events: [SSEScriptEvent(id: "1", data: String(repeating: "é", count: 14))])),
        .sse("/orders", script: SSEScript(events: (1...4).map { SSEScriptEvent(id: "\($0)", event: "order", data: #"{"n":\#($0)}"#) })),
        .sse("/body", method: "POST") { request in SSEScript(events: [SSEScriptEvent(data: request.body ?? "none")]) },
        .sse(
            "/closed", accept: { _ in .refuse(status: 403, headers: ["X-Request-Id": "r-9"], body: #"{"error":"not you"}"#) },
            script: SSEScript(events: [])),
    ]

    static func withProxy(
        _ routes: @escaping @Sendable (RunningDuplexServer) -> [ScriptedRoute],
        _ body: @escaping @Sendable (_ proxy: RunningDuplexServer, _ backend: RunningDuplexServer) async throws -> Void
    ) async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: backend) { backend in
                try await withDuplexServer(routes: routes(backend)) { proxy in try await body(proxy, backend) }
            }
        }
    }

    /// The first `count` events of `manager`'s stream.
    static func events(_ manager: ServerSentEventManager, _ count: Int) async throws -> [ServerSentEvent] {
        let events = manager.events
        try await manager.connect()
        var received: [ServerSentEvent] = []
        for await event in events {
            received.append(event)
            if received.count == count { break }
        }
        return received
    }

    @Test("Last-Event-ID goes upstream; nth 2 is held back; set keeps the id and the event name; the journal has both legs")
    func rulesPerEvent() async throws {
        try await Self.withProxy({ backend in
            [
                .proxy(
                    "/orders",
                    script: ProxyScript(
                        upstream: backend.httpURL("/orders"),
                        toClient: [
                            ProxyRule(match: .nth(2), do: [.forward(false)]),
                            ProxyRule(match: try! .json(#"{"n":4}"#), do: [try! .set(#"{"n":40}"#)]),
                        ]))
            ]
        }) { proxy, backend in
            let manager = ServerSentEventManager(request: SSERequest(url: proxy.httpURL("/orders")), retryPolicy: .disabled, lastEventID: "1")
            let received = try await Self.events(manager, 2)
            await manager.terminate()
            #expect(received.map(\.id) == ["2", "4"])
            #expect(received.map(\.data) == [#"{"n":2}"#, #"{"n":40}"#])
            #expect(received.allSatisfy { $0.event == "order" })
            let asked = try await backend.journal.first(within: .seconds(5)) { $0.kind == .open }
            #expect(asked.request?.lastEventID == "1")
            let held = try #require(proxy.journal.entries.first { $0.leg == .upstream && $0.id == "3" })
            #expect(held.action?.contains("hold back") == true)
            #expect(proxy.journal.entries.contains { $0.leg == .client && $0.direction == .out && $0.id == "4" && $0.data == #"{"n":40}"# })
        }
    }

    @Test("a POST's body goes upstream; a refusal passes through with its body; a down upstream is 502")
    func bodyRefusalDown() async throws {
        let down = try RefusingPort()
        try await Self.withProxy({ backend in
            [
                .proxy("/body", method: "POST", script: ProxyScript(upstream: backend.httpURL("/body"))),
                .proxy("/closed", script: ProxyScript(upstream: backend.httpURL("/closed"))),
                .proxy("/down", script: ProxyScript(upstream: URL(string: "http://127.0.0.1:\(down.port)/x")!)),
            ]
        }) { proxy, _ in
            let post = ServerSentEventManager(
                request: SSERequest(url: proxy.httpURL("/body"), method: .post, body: Data("prompt".utf8)), retryPolicy: .disabled)
            let posted = try await Self.events(post, 1)
            #expect(posted.map(\.data) == ["prompt"])
            await post.terminate()

            let refused = ServerSentEventManager(request: SSERequest(url: proxy.httpURL("/closed")), retryPolicy: .disabled)
            let error = await #expect(throws: SSEError.self) { try await refused.connect() }
            #expect(error?.status == 403)
            #expect(error?.response?.text == #"{"error":"not you"}"#)
            #expect(error?.response?.headers.contains { $0.name.lowercased() == "x-request-id" && $0.value == "r-9" } == true)
            await refused.terminate()

            let unreachable = ServerSentEventManager(request: SSERequest(url: proxy.httpURL("/down")), retryPolicy: .disabled)
            let failed = await #expect(throws: SSEError.self) { try await unreachable.connect() }
            #expect(failed?.status == 502)
            await unreachable.terminate()
        }
    }

    @Test("a rule's close ends the stream; a rule's drop cuts it")
    func closeAndDrop() async throws {
        try await Self.withProxy({ backend in
            [
                .proxy(
                    "/ends",
                    script: ProxyScript(upstream: backend.httpURL("/orders"), toClient: [ProxyRule(match: .nth(2), do: [.close(code: 1000)])])),
                .proxy("/cut", script: ProxyScript(upstream: backend.httpURL("/orders"), toClient: [ProxyRule(match: .nth(2), do: [.drop])])),
            ]
        }) { proxy, _ in
            let ends = ServerSentEventManager(request: SSERequest(url: proxy.httpURL("/ends")), retryPolicy: .disabled)
            let endStates = ends.stateEvents
            #expect(try await Self.events(ends, 1).map(\.id) == ["1"])
            let ended = try await endStates.first(within: .seconds(10)) { if case .disconnected = $0 { true } else { false } }
            await ends.terminate()
            let cut = ServerSentEventManager(request: SSERequest(url: proxy.httpURL("/cut")), retryPolicy: .disabled)
            let cutStates = cut.stateEvents
            #expect(try await Self.events(cut, 1).map(\.id) == ["1"])
            let dropped = try await cutStates.first(within: .seconds(10)) { if case .disconnected = $0 { true } else { false } }
            await cut.terminate()
            // An end is the server's; a cut is a lost connection.
            #expect(ended != dropped, "\(ended) \(dropped)")
            let journal = proxy.journal.entries
            #expect(journal.contains { $0.path == "/cut" && $0.kind == .drop && $0.leg == .client })
            #expect(journal.contains { $0.path == "/ends" && $0.kind == .close && $0.leg == .client })
            #expect(!journal.contains { $0.leg == .client && $0.direction == .out && $0.id == "2" })
        }
    }

    @Test("a breakpoint holds an SSE event: the test injects an event before it and forwards a replacement, which keeps its id")
    func breakpointOnAnEvent() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: Self.backend) { backend in
                let route = ScriptedRoute.proxy("/orders", script: ProxyScript(upstream: backend.httpURL("/orders")))
                let breakpoint = try route.breakpoint(.toClient) { $0.text == #"{"n":2}"# }
                try await withDuplexServer(routes: [route]) { proxy in
                    let manager = ServerSentEventManager(request: SSERequest(url: proxy.httpURL("/orders")), retryPolicy: .disabled)
                    let events = manager.events
                    try await manager.connect()
                    let held = try await breakpoint.held(within: .seconds(10))
                    #expect(held.message == .text(#"{"n":2}"#))
                    held.inject("notice")
                    held.forward(replacing: #"{"n":20}"#)
                    var received: [ServerSentEvent] = []
                    for await event in events {
                        received.append(event)
                        if received.count == 5 { break }
                    }
                    #expect(received.map(\.data) == [#"{"n":1}"#, "notice", #"{"n":20}"#, #"{"n":3}"#, #"{"n":4}"#])
                    #expect(received[2].id == "2")
                    await manager.terminate()
                    #expect(proxy.journal.entries.contains { $0.action?.hasPrefix("held at a breakpoint; the test replaced it") == true })
                }
            }
        }
    }

    @Test("a rule's cut writes half the event and cuts the stream; a rule's hang leaves it open and silent, the upstream's ended")
    func cutAndHang() async throws {
        try await Self.withProxy({ backend in
            [
                .proxy("/cut", script: ProxyScript(upstream: backend.httpURL("/orders"), toClient: [ProxyRule(match: .nth(2), do: [.cut])])),
                .proxy("/hang", script: ProxyScript(upstream: backend.httpURL("/orders"), toClient: [ProxyRule(match: .nth(2), do: [.hang])])),
                .proxy("/cutAccents", script: ProxyScript(upstream: backend.httpURL("/accents"), toClient: [ProxyRule(match: .nth(1), do: [.cut])])),
            ]
        }) { proxy, backend in
            let body = try await TestHTTPResponse.get(port: proxy.port, "/cut") { response in
                do { while try await response.readChunk() {} } catch {}
                return response.bodyText
            }
            // Event 1 whole, then the first half of event 2, and no end.
            let second = #"id: 2\#nevent: order\#ndata: {"n":2}\#n\#n"#
            #expect(body.hasPrefix(#"id: 1\#nevent: order\#ndata: {"n":1}\#n\#n"#), "\(body)")
            #expect(body.hasSuffix(String(second.prefix(second.utf8.count / 2))), "\(body)")
            #expect(proxy.journal.entries.contains { $0.path == "/cut" && $0.kind == .drop && $0.action == "cut in the middle of an event" })
            // A cut inside a character sends that character's first byte, not a replacement's: the
            // event is 57 bytes as the proxy writes it, and its first 28 end in the first "é".
            let accents = try await TestHTTPResponse.get(port: proxy.port, "/cutAccents") { response in
                do { while try await response.readChunk() {} } catch {}
                return response.bodyBytes
            }
            #expect(accents == Array("id: 1\nevent: message\ndata: ".utf8) + [0xC3])

            let hung = ServerSentEventManager(request: SSERequest(url: proxy.httpURL("/hang")), retryPolicy: .disabled)
            let states = hung.stateEvents
            #expect(try await Self.events(hung, 1).map(\.id) == ["1"])
            // The upstream's stream ends; the client's stays open.
            _ = try await proxy.journal.first(within: .seconds(10)) { $0.path == "/hang" && $0.kind == .drop && $0.leg == .upstream }
            await #expect(throws: TimeoutError.self) {
                try await states.first(within: .milliseconds(300)) { if case .disconnected = $0 { true } else { false } }
            }
            await hung.terminate()
        }
    }

    @Test("an SSE proxy with toUpstream rules, a reply or a WebSocket fault, and a WebSocket proxy with an SSE fault, are refused at start")
    func refusedAtStart() async throws {
        let upstream = URL(string: "http://127.0.0.1:1/x")!
        for script in [
            ProxyScript(upstream: upstream, toUpstream: [ProxyRule(match: .any, do: [.forward(false)])]),
            ProxyScript(upstream: upstream, toClient: [ProxyRule(match: .any, do: [.reply("x")])]),
            ProxyScript(upstream: URL(string: "ftp://127.0.0.1/x")!),
            ProxyScript(upstream: upstream, toClient: [ProxyRule(match: .any, do: [.fragment(frames: 2)])]),
            ProxyScript(upstream: URL(string: "ws://127.0.0.1:1/x")!, toClient: [ProxyRule(match: .any, do: [.cut])]),
            ProxyScript(upstream: URL(string: "ws://127.0.0.1:1/x")!, toUpstream: [ProxyRule(match: .any, do: [.fault(.invalidUTF8)])]),
        ] {
            await #expect(throws: DuplexServerError.self) { try await withDuplexServer(routes: [.proxy("/p", script: script)]) { _ in } }
        }
    }
}
