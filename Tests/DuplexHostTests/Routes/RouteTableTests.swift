import HTTPTypes
import Hummingbird
import Testing

@testable import DuplexHost

/// The route table on its own: how a pattern matches a path, which route wins, and which set
/// wins when two have the same entry.
@Suite("RouteTable")
struct RouteTableTests {
    @Test("a pattern matches literal segments, captures :name, takes the rest with **, and ignores empty segments")
    func patterns() {
        #expect(RoutePattern("/echo").match("/echo") == [:])
        #expect(RoutePattern("/echo").match("/echo/") == [:])
        #expect(RoutePattern("/echo").match("/echoes") == nil)
        #expect(RoutePattern("/echo").match("/echo/more") == nil)
        #expect(RoutePattern("/chat/:room").match("/chat/lobby") == ["room": "lobby"])
        #expect(RoutePattern("/chat/:room").match("/chat/") == nil)
        #expect(RoutePattern("/chat/:room").match("/chat/a/b") == nil)
        #expect(RoutePattern("/chat/:room/events").match("/chat/lobby/events") == ["room": "lobby"])
        #expect(RoutePattern("/**").match("/any/depth/at/all") == [:])
        #expect(RoutePattern("/v1/**").match("/v1") == [:])
        #expect(RoutePattern("/v1/**").match("/v2/x") == nil)
        #expect(RoutePattern("/a/**/b").match("/a/**/b") == [:], "** is the rest only when last")
        #expect(RoutePattern("chat/:room").description == "/chat/:room")
    }

    @Test("the most specific pattern wins: a literal over a capture over **")
    func specificity() {
        #expect(RoutePattern("/chat/lobby").isMoreSpecific(than: RoutePattern("/chat/:room")))
        #expect(RoutePattern("/chat/:room").isMoreSpecific(than: RoutePattern("/**")))
        #expect(!RoutePattern("/**").isMoreSpecific(than: RoutePattern("/chat/:room")))
        #expect(RoutePattern("/v1/**").isMoreSpecific(than: RoutePattern("/**")))
    }

    /// A WebSocket route whose service is named by the header it adds.
    func webSocket(_ path: String, _ name: String) -> RouteTable.Route {
        .webSocket(
            path,
            name: name,
            upgrade: { _, captures in
                var headers: HTTPFields = [.secWebSocketProtocol: name]
                if let room = captures["room"] { headers[.secWebSocketProtocol] = "\(name) \(room)" }
                return .accept(headers, WebSocketService { _, _ in })
            },
            plain: { _, _ in Response(status: .upgradeRequired) }
        )
    }

    func upgrade(_ table: RouteTable, _ path: String) -> String? {
        let request = Request(head: HTTPRequest(method: .get, scheme: "http", authority: "localhost", path: path), body: .init(buffer: .init()))
        switch table.webSocket(for: request) {
        case .accept(let headers, _): return headers[.secWebSocketProtocol]
        case .refuse(let refusal):
            #expect(refusal.status == .badRequest)
            return nil
        case .later:
            Issue.record("these routes answer at once")
            return nil
        }
    }

    @Test(
        "an upgrade goes to the most specific WebSocket route for its path; an earlier set's entry wins over a later one's; none matching is refused with 400"
    )
    func webSocketUpgrades() {
        var table = RouteTable()
        table.add([webSocket("/chat/lobby", "replayed"), webSocket("/echo", "first echo")])
        table.add([webSocket("/**", "anything"), webSocket("/chat/:room", "live"), webSocket("/echo", "second echo")])
        #expect(upgrade(table, "/chat/lobby") == "replayed")
        #expect(upgrade(table, "/chat/other") == "live other")
        #expect(upgrade(table, "/echo") == "first echo", "the same method and pattern: the earlier set's")
        #expect(upgrade(table, "/somewhere/else") == "anything")
        #expect(table.routes.count == 5, "the four, after the host's own refused-request route")
        #expect(
            RouteTable().routes.map(\.pattern.description) == ["\(RouteTable.Route.refusedPath)/:status"], "every table answers a refused request")

        var plain = RouteTable()
        plain.add([.get("/health") { _, _ in Response(status: .ok) }, webSocket("/echo", "echo")])
        #expect(upgrade(plain, "/health") == nil, "a plain route takes no upgrade")
        #expect(upgrade(plain, "/nowhere") == nil)
    }

    @Test("the names the server counts connections under are its WebSocket and stream routes', once each, in order; plain routes have none")
    func connectionRouteNames() {
        var table = RouteTable()
        table.add([
            .get("/health") { _, _ in Response(status: .ok) },
            webSocket("/echo", "echo"),
            .stream("/events", name: "events") { _ in .json(.ok, "{}") },
            .stream("/events", name: "events", method: .post) { _ in .json(.ok, "{}") },
            webSocket("/feed/*", "/feed/*"),
        ])
        table.add([webSocket("/echo", "echo again")])
        #expect(table.connectionRouteNames == ["echo", "events", "/feed/*"], "the later set's /echo is left out with its name")
        #expect(RouteTable().connectionRouteNames.isEmpty)
    }
}
