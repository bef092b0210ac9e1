import DuplexHost
import DuplexSchema
import DuplexTesting
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import Testing

@testable import DuplexServer

/// `GET /metrics`: what the server counts, scraped as Prometheus would.
@Suite("GET /metrics")
struct MetricsRouteTests {
    /// One scrape: each sample's value by its series (`name{labels}` as written), and the
    /// response's content type.
    struct Scrape {
        var contentType: String
        var samples: [String: Double]
        var text: String

        subscript(_ series: String) -> Double? { samples[series] }

        /// How many series of the metric `name` there are.
        func seriesCount(_ name: String) -> Int {
            samples.keys.filter { $0 == name || $0.hasPrefix(name + "{") }.count
        }
    }

    static func scrape(_ port: Int) async throws -> Scrape {
        try await TestHTTPResponse.get(port: port, "/metrics") { response in
            #expect(response.status == 200)
            let text = try await response.readBody()
            var samples: [String: Double] = [:]
            for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                    Issue.record("not a sample line: \(line)")
                    continue
                }
                samples[String(line[..<space])] = value
            }
            return Scrape(contentType: response.headers.first(name: "Content-Type") ?? "", samples: samples, text: text)
        }
    }

    /// The next line `lines` logs with `message` on `route`: the server logs a connection's end
    /// once it is counted closed ("WebSocket closed", "event stream ended").
    static func logged(_ message: String, route: String, in lines: AsyncStream<WatchedLogger.Line>) async throws {
        _ = try await lines.first(within: .seconds(10)) { $0.message == message && $0.metadata["route"] == route }
    }

    @Test("a scripted route's connections are counted under its own pattern, never as other, and its pattern is a chaos route= scope")
    func scriptedRouteLabels() async throws {
        let feed = ScriptedRoute.webSocket("/feed/*", script: WebSocketScript(onConnect: [.send("hello")]))
        var scripted = DuplexServerConfiguration(chaos: true)
        scripted.routes = [feed]
        let configuration = scripted
        try await withTimeout {
            try await withDuplexServer(configuration: configuration) { server in
                let before = try await Self.scrape(server.port)
                #expect(before[#"duplex_connections_total{route="/feed/*",transport="tcp"}"#] == 0, "declared at start, from the table")
                try await TestWebSocket.with(port: server.port, path: "/feed/prices") { socket in
                    let hello = try await socket.receiveText()
                    #expect(hello == "hello")
                    let (status, body) = try await TestHTTPResponse.get(port: server.port, "/_chaos/drop?route=/feed/*", method: .POST) {
                        ($0.status, try await $0.readBody())
                    }
                    #expect(status == 200 && body == #"{"affected":1}"#, "\(body)")
                }
                let scrape = try await Self.scrape(server.port)
                #expect(scrape[#"duplex_connections_total{route="/feed/*",transport="tcp"}"#] == 1)
                #expect(scrape[#"duplex_messages_total{route="/feed/*",direction="out"}"#] == 1, "\(scrape.text)")
                #expect(scrape[#"duplex_connections_total{route="other",transport="tcp"}"#] == 0, "no connection counted as other")
            }
        }
    }

    @Test("the route labels at start and the names a chaos route= takes are the route table's, nothing kept by hand")
    func routeNamesFromTheTable() async throws {
        var configuration = DuplexServerConfiguration(chaos: true)
        configuration.routes = [ScriptedRoute.sse("/orders", script: SSEScript(events: [SSEScriptEvent(id: "1", data: "a")]))]
        let scripted = configuration
        try await withTimeout {
            try await withDuplexServer(configuration: scripted) { server in
                let names = server.server.makeRouteTable().connectionRouteNames
                #expect(names == ["/orders", "metrics-live", "echo", "chat", "events", "chat-events"])
                let scrape = try await Self.scrape(server.port)
                let prefix = #"duplex_connections_total{route=""#
                let labels = scrape.samples.keys.filter { $0.hasPrefix(prefix) && $0.hasSuffix(#"",transport="tcp"}"#) }
                    .map { String($0.dropFirst(prefix.count).prefix { $0 != "\"" }) }
                #expect(Set(labels) == Set(names + ["other"]), "\(labels)")
                let (status, body) = try await TestHTTPResponse.get(port: server.port, "/_chaos/drop?route=nope", method: .POST) {
                    ($0.status, try await $0.readBody())
                }
                #expect(status == 400)
                #expect(body == #"{"error":"route must be /orders, metrics-live, echo, chat, events or chat-events"}"#)

                // docs/server.md names the same routes, in the metrics table and for route=.
                let docs = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../../docs/server.md")
                let lines = try String(contentsOf: docs, encoding: .utf8).split(separator: "\n")
                for place in ["| `duplex_connections_open`", "Scope with `?route=NAME`"] {
                    let at = try #require(lines.firstIndex { $0.contains(place) }, "docs/server.md: \(place)")
                    let text = lines[at...].prefix(2).joined(separator: " ")
                    for name in names.dropFirst() {
                        #expect(text.contains("`\(name)`"), "docs/server.md's \(place) lacks \(name)")
                    }
                }
            }
        }
    }

    @Test("an echo connection's messages and bytes each way, and the connection itself, in Prometheus' text format")
    func echoCounted() async throws {
        try await withTimeout {
            let (logger, lines) = WatchedLogger.make(level: .debug)
            try await withDuplexServer(logger: logger) { server in
                try await TestWebSocket.with(port: server.port, path: "/echo") { echo in
                    try await echo.sendText("hello")
                    try await echo.sendText("wörld")
                    #expect(try await echo.receiveText() == "hello")
                    #expect(try await echo.receiveText() == "wörld")
                    let scrape = try await Self.scrape(server.port)
                    #expect(scrape.contentType == "text/plain; version=0.0.4; charset=utf-8")
                    #expect(scrape.text.contains("# TYPE duplex_messages_total counter"))
                    #expect(scrape[#"duplex_connections_total{route="echo",transport="tcp"}"#] == 1)
                    #expect(scrape[#"duplex_connections_open{route="echo",transport="tcp"}"#] == 1)
                    #expect(scrape[#"duplex_messages_total{route="echo",direction="in"}"#] == 2)
                    #expect(scrape[#"duplex_messages_total{route="echo",direction="out"}"#] == 2)
                    // "hello" and "wörld": 5 and 6 bytes of UTF-8.
                    #expect(scrape[#"duplex_message_bytes_total{route="echo",direction="in"}"#] == 11)
                    #expect(scrape[#"duplex_message_bytes_total{route="echo",direction="out"}"#] == 11)
                    #expect((scrape["duplex_process_resident_memory_bytes"] ?? 0) > 1_000_000)
                    #expect((scrape["duplex_process_open_fds"] ?? 0) >= 3)
                    try await echo.sendClose()
                    _ = try await echo.receiveClose()
                }
                try await Self.logged("WebSocket closed", route: "echo", in: lines)
                let after = try await Self.scrape(server.port)
                #expect(after[#"duplex_connections_open{route="echo",transport="tcp"}"#] == 0)
                #expect(after[#"duplex_connections_total{route="echo",transport="tcp"}"#] == 1)
                #expect(after[#"duplex_close_codes_sent_total{code="1000"}"#] == 1, "the server's answer to the client's close")
                #expect(after[#"duplex_close_codes_received_total{code="1000"}"#] == 1, "the client's close")
            }
        }
    }

    @Test("chat: what a room fans out is counted per member it reached; SSE events are counted as written")
    func chatAndEventsCounted() async throws {
        try await withTimeout {
            let (logger, lines) = WatchedLogger.make(level: .debug)
            try await withDuplexServer(logger: logger) { server in
                // Every text frame each member reads, until the server's close: what was written to it.
                let received = NIOLockedValueBox(0)
                func read(_ member: TestWebSocket, until match: String? = nil) async throws {
                    while true {
                        let frame = try await member.receiveFrame()
                        if frame.close != nil { return }
                        guard let text = frame.text else { continue }
                        received.withLockedValue { $0 += 1 }
                        if let match, text.contains(match) { return }
                    }
                }
                try await TestWebSocket.with(port: server.port, path: "/chat/metrics?name=alice") { alice in
                    try await read(alice, until: #""type":"welcome""#)
                    try await TestWebSocket.with(port: server.port, path: "/chat/metrics?name=bob") { bob in
                        try await read(bob, until: #""type":"welcome""#)
                        try await read(alice, until: #""name":"bob""#)  // bob joined
                        let open = try await Self.scrape(server.port)
                        #expect(open[#"duplex_connections_open{route="chat",transport="tcp"}"#] == 2, "counted from the welcome on")
                        try await alice.sendText(#"{"type":"say","clientMessageId":"a1","text":"hi"}"#)
                        try await read(bob, until: #""text":"hi""#)
                        try await bob.sendClose()
                        try await read(bob)
                    }
                    try await read(alice, until: #""type":"left""#)
                    try await alice.sendClose()
                    try await read(alice)
                }
                // A connection's counts are added at the latest at the end of the event loop's
                // turn that wrote them; its close is read in a later turn of the same loop.
                try await Self.logged("WebSocket closed", route: "chat", in: lines)
                try await Self.logged("WebSocket closed", route: "chat", in: lines)
                let scrape = try await Self.scrape(server.port)
                let written = received.withLockedValue { $0 }
                #expect(written >= 7, "bob: his welcome, alice's say; alice: her welcome, bob's join, her say, its ack, bob's departure")
                #expect(scrape[#"duplex_messages_total{route="chat",direction="out"}"#] == Double(written))
                #expect(scrape[#"duplex_messages_total{route="chat",direction="in"}"#] == 1)
                #expect(scrape[#"duplex_connections_open{route="chat",transport="tcp"}"#] == 0)
                // A resend (the same clientMessageId) is a duplicate; a resume with since finds its history.
                try await TestWebSocket.with(port: server.port, path: "/chat/metrics?name=carol&since=0") { carol in
                    _ = try await carol.receiveText()  // welcome
                    for _ in 0..<2 { try await carol.sendText(#"{"type":"say","clientMessageId":"c1","text":"once"}"#) }
                    // Each say is counted before its ack is written: after the second ack, both are.
                    var acks = 0
                    while acks < 2 {
                        if try await carol.receiveText().contains(#""type":"ack""#) { acks += 1 }
                    }
                    let scrape = try await Self.scrape(server.port)
                    #expect(scrape["duplex_chat_messages_recorded_total"] == 2, "alice's and carol's first")
                    #expect(scrape["duplex_chat_duplicate_says_total"] == 1)
                    #expect(scrape[#"duplex_chat_resumes_total{recovered="true"}"#] == 1)
                    #expect(scrape[#"duplex_chat_resumes_total{recovered="false"}"#] == 0)
                    #expect(scrape["duplex_chat_rooms"] == 1)
                    #expect((scrape["duplex_chat_history_bytes"] ?? 0) > 0)
                }
                try await TestHTTPResponse.get(port: server.port, "/events?interval=10") { stream in
                    for _ in 0..<3 { _ = try await stream.nextEvent() }
                }
                // The stream counts each event after writing it, and is counted ended after the last.
                try await Self.logged("event stream ended", route: "events", in: lines)
                let events = try await Self.scrape(server.port)
                #expect((events[#"duplex_messages_total{route="events",direction="out"}"#] ?? 0) >= 3)
                #expect(events[#"duplex_connections_total{route="events",transport="tcp"}"#] == 1)
                #expect(events[#"duplex_connections_open{route="events",transport="tcp"}"#] == 0)
            }
        }
    }

    @Test("refusals by status, close codes sent and faults injected are counted under fixed labels: odd requests add no series")
    func refusalsFaultsAndBoundedLabels() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(chaos: true)) { server in
                let before = try await Self.scrape(server.port)
                let (upgrade, _) = try await TestHTTPResponse.get(port: server.port, "/echo") { ($0.status, try await $0.readBody()) }
                #expect(upgrade == 426)
                let (longLine, _) = try await TestHTTPResponse.get(port: server.port, "/" + String(repeating: "x", count: 20_000)) {
                    ($0.status, try await $0.readBody())
                }
                #expect(longLine == 414)
                for n in 0..<20 {
                    _ = try await TestHTTPResponse.get(port: server.port, "/nowhere-\(n)?route=r\(n)") { try await $0.readBody() }
                }
                try await TestWebSocket.with(port: server.port, path: "/echo") { echo in
                    try await echo.sendText("warm")
                    _ = try await echo.receiveText()
                    let (status, _) = try await TestHTTPResponse.get(port: server.port, "/_chaos/close?code=4321&route=echo", method: .POST) {
                        ($0.status, try await $0.readBody())
                    }
                    #expect(status == 200)
                    #expect(try await echo.receiveClose().code == 4321)
                }
                let (switched, _) = try await TestHTTPResponse.get(port: server.port, "/_chaos/path-switch", method: .POST) {
                    ($0.status, try await $0.readBody())
                }
                #expect(switched == 200)
                let scrape = try await Self.scrape(server.port)
                #expect(scrape[#"duplex_faults_injected_total{fault="path-switch"}"#] == 1, "every fault is counted, the path switch too")
                #expect(scrape[#"duplex_http_refusals_total{status="426"}"#] == 1)
                #expect(scrape[#"duplex_http_refusals_total{status="414"}"#] == 1)
                #expect(scrape[#"duplex_faults_injected_total{fault="close"}"#] == 1)
                #expect(scrape[#"duplex_close_codes_sent_total{code="other"}"#] == 1, "4321 is an application's code: counted as other")
                for name in [
                    "duplex_http_refusals_total", "duplex_close_codes_sent_total", "duplex_faults_injected_total", "duplex_messages_total",
                    "duplex_connections_open",
                ] {
                    #expect(scrape.seriesCount(name) == before.seriesCount(name), "\(name): no series added by requests")
                }
                #expect(!scrape.text.contains("nowhere"))
            }
        }
    }

    @Test(
        "GET /metrics/live: the samples and the table's route names as SSE every interval, for the demo page's live view, which names no route itself; a bad interval gets 400"
    )
    func live() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(chaos: true)) { server in
                try await TestHTTPResponse.get(port: server.port, "/metrics/live?interval=100") { stream in
                    #expect(stream.headers.first(name: "Content-Type") == "text/event-stream; charset=utf-8")
                    var events: [ServerSentEvent] = []
                    while events.count < 2, let event = try await stream.nextEvent() {
                        if event.event == "metrics" { events.append(event) }
                    }
                    try #require(events.count == 2)
                    struct Live: Decodable {
                        var chaos: Bool
                        var routes: [String]
                        var samples: [String: Double]
                    }
                    let live = try JSONDecoder().decode(Live.self, from: Data(events[1].data.utf8))
                    #expect(live.chaos)
                    #expect(live.routes == server.server.makeRouteTable().connectionRouteNames)
                    #expect(live.routes.contains("chat-events"))
                    #expect(live.samples[#"duplex_connections_open{route="metrics-live",transport="tcp"}"#] == 1, "the live stream counts itself")
                    #expect((live.samples[#"duplex_messages_total{route="metrics-live",direction="out"}"#] ?? 0) >= 1, "and the event before")
                }
                // The page charts and offers the routes the live events name; it keeps no list.
                let page = try await TestHTTPResponse.get(port: server.port, "/") { try await $0.readBody() }
                #expect(page.contains("syncRoutes(data.routes"))
                #expect(!page.contains("innerHTML"), "route names (a script's paths) are written as text, never parsed as HTML")
                for name in ["echo", "chat", "events", "chat-events"] {
                    #expect(!page.contains(#""\#(name)""#) && !page.contains("route=\(name)\""), "the page names \(name) itself")
                }
                for bad in ["0", "99", "60001", "soon"] {
                    let (status, body) = try await TestHTTPResponse.get(port: server.port, "/metrics/live?interval=\(bad)") {
                        ($0.status, try await $0.readBody())
                    }
                    #expect(status == 400 && body.contains("invalid_interval"), "interval=\(bad)")
                }
            }
        }
    }
}
