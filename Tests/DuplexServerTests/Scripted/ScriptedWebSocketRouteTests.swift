import DuplexServer
import DuplexTesting
import Foundation
import NIOHTTP1
import Synchronization
import Testing

/// Scripted WebSocket routes, read byte for byte by a raw peer: replies, refusals, faults on
/// what the route sends, withheld pongs, and the journal of it all.
@Suite("Scripted WebSocket routes")
struct ScriptedWebSocketRouteTests {
    static let feed = ScriptedRoute.webSocket(
        "/feed",
        script: WebSocketScript(
            subprotocols: ["feed.v1"],
            onConnect: [.send(#"{"type":"hello"}"#)],
            onMessage: [
                ScriptRule(match: try! .json(#"{"type":"ping"}"#), do: [.send(#"{"type":"pong"}"#)]),
                ScriptRule(match: .text("bye"), do: [.close(code: 4001, reason: "bye")]),
                ScriptRule(match: .nth(3), do: [.drop]),
            ]
        )
    )

    @Test("a script answers on connect and by rule, picks its subprotocol, and closes with its code")
    func repliesAndCloses() async throws {
        try await withTimeout {
            try await withDuplexServer(routes: [Self.feed]) { server in
                try await TestWebSocket.with(port: server.port, path: "/feed?user=ada", extraHeaders: ["Sec-WebSocket-Protocol: other, feed.v1"]) {
                    socket in
                    #expect(socket.status == 101)
                    #expect(socket.head.lowercased().contains("sec-websocket-protocol: feed.v1"))
                    #expect(try await socket.receiveText() == #"{"type":"hello"}"#)
                    try await socket.sendText(#"{"id":7,"type":"ping"}"#)
                    #expect(try await socket.receiveText() == #"{"type":"pong"}"#)
                    try await socket.sendText("bye")
                    let close = try await socket.receiveClose()
                    #expect(close.code == 4001)
                    #expect(close.reason == "bye")
                }
                let closed = try await server.journal.first(within: .seconds(10)) { $0.kind == .close && $0.direction == .out }
                #expect(closed.code == 4001)
                let kinds = server.journal.entries.filter { $0.connection == closed.connection }.map {
                    "\($0.direction.rawValue) \($0.kind.rawValue)"
                }
                #expect(Array(kinds.prefix(6)) == ["in open", "out text", "in text", "out text", "in text", "out close"])
                let open = try #require(server.journal.entries.first { $0.kind == .open })
                #expect(open.request?.subprotocol == "feed.v1")
                #expect(open.request?.subprotocols == ["other", "feed.v1"])
                #expect(open.request?.queryItem("user") == "ada")
            }
        }
    }

    @Test("the third message drops the connection with no close frame, and the journal says so")
    func dropsOnNth() async throws {
        try await withTimeout {
            try await withDuplexServer(routes: [Self.feed]) { server in
                try await TestWebSocket.with(port: server.port, path: "/feed") { socket in
                    _ = try await socket.receiveText()
                    try await socket.sendText("one")
                    try await socket.sendText("two")
                    try await socket.sendText("three")
                    var frames: [TestWebSocket.Frame] = []
                    do {
                        while true { frames.append(try await socket.receiveFrame()) }
                    } catch is TestWebSocket.UnexpectedEnd {}
                    #expect(frames.allSatisfy { $0.close == nil })
                }
                let drop = try await server.journal.first(within: .seconds(10)) { $0.kind == .drop }
                #expect(drop.direction == .out)
                #expect(server.journal.entries.filter { $0.kind == .text && $0.direction == .in }.map(\.data) == ["one", "two", "three"])
            }
        }
    }

    @Test("a refusal answers its status, headers and body the first time, then the route upgrades")
    func refusesFirst() async throws {
        let route = ScriptedRoute.webSocket(
            "/busy",
            script: WebSocketScript(
                onConnect: [.send("welcome")],
                refuse: ScriptRefusal(status: 429, headers: ["Retry-After": "1"], body: #"{"error":"slow down"}"#, times: 1)
            )
        )
        try await withTimeout {
            try await withDuplexServer(routes: [route]) { server in
                try await TestWebSocket.with(port: server.port, path: "/busy") { socket in
                    #expect(socket.status == 429)
                    #expect(socket.head.lowercased().contains("retry-after: 1"))
                }
                try await TestWebSocket.with(port: server.port, path: "/busy") { socket in
                    #expect(socket.status == 101)
                    let welcome = try await socket.receiveText()
                    #expect(welcome == "welcome")
                }
                let refused = try await server.journal.first(within: .seconds(5)) { $0.kind == .refused }
                #expect(refused.code == 429)
            }
        }
    }

    @Test(
        "a script's * is one segment, as docs/scripts.md says: /feed/* serves /feed/x and /feed/abc, not /feed/a/b; /feed/*/deep serves /feed/x/deep")
    func wildcardRoutes() async throws {
        let routes = try ScriptFile.routes(
            from: Data(
                #"{"routes": [{"path": "/feed/*", "websocket": {"onConnect": [{"send": "one"}]}}, {"path": "/feed/*/deep", "websocket": {"onConnect": [{"send": "deep"}]}}]}"#
                    .utf8))
        try await withTimeout {
            try await withDuplexServer(routes: routes) { server in
                for (path, expected) in [("/feed/x", "one"), ("/feed/abc", "one"), ("/feed/x/deep", "deep")] {
                    try await TestWebSocket.with(port: server.port, path: path) { socket in
                        #expect(socket.status == 101, "\(path)")
                        let text = try await socket.receiveText()
                        #expect(text == expected, "\(path)")
                    }
                }
                for path in ["/feed/a/b", "/feed"] {
                    try await TestWebSocket.with(port: server.port, path: path) { socket in
                        #expect(socket.status == 400, "\(path): no route")
                    }
                }
            }
        }
    }

    @Test("a refusal over HTTP/1.1 without an upgrade is 426; a route's handler refuses with any status")
    func handlerRefuses() async throws {
        let route = ScriptedRoute.webSocket(
            "/private",
            onConnect: { socket in try socket.send("in") },
            accept: { request in
                request.header("Authorization") == "Bearer good" ? .accept : .refuse(status: 401, headers: ["WWW-Authenticate": "Bearer"])
            }
        )
        try await withTimeout {
            try await withDuplexServer(routes: [route]) { server in
                try await TestWebSocket.with(port: server.port, path: "/private") { socket in
                    #expect(socket.status == 401)
                    #expect(socket.head.lowercased().contains("www-authenticate: bearer"))
                }
                try await TestWebSocket.with(port: server.port, path: "/private", extraHeaders: ["Authorization: Bearer good"]) { socket in
                    let text = try await socket.receiveText()
                    #expect(text == "in")
                }
                try await TestHTTPResponse.get(port: server.port, "/private") { response in
                    #expect(response.status == 426)
                }
            }
        }
    }

    @Test("withheld pongs: the client's ping gets no pong, and the journal has the ping")
    func withholdsPongs() async throws {
        let route = ScriptedRoute.webSocket(
            "/quiet", script: WebSocketScript(onMessage: [ScriptRule(match: .any, do: [.send("seen")])], answerPings: false))
        try await withTimeout {
            try await withDuplexServer(routes: [route]) { server in
                try await TestWebSocket.with(port: server.port, path: "/quiet") { socket in
                    try await socket.sendFrame(opcode: 0x9, payload: Array("are you there".utf8))
                    try await socket.sendText("next")
                    let frame = try await socket.receiveFrame()
                    #expect(frame.opcode == 0x1)
                    #expect(frame.text == "seen")
                }
                let ping = try await server.journal.first(within: .seconds(5)) { $0.kind == .ping }
                #expect(ping.data == "are you there")
                #expect(!server.journal.entries.contains { $0.kind == .pong })
            }
        }
    }

    @Test("faults on sends: fragmented into frames, duplicated, reordered, then dropped after the Nth")
    func sendFaults() async throws {
        let fragmenting = ScriptedRoute.webSocket(
            "/fragments",
            faults: WebSocketFaults(fragmentSends: 3),
            onConnect: { socket in try socket.send("abcdefghi") }
        )
        let shuffling = ScriptedRoute.webSocket(
            "/shuffle",
            faults: WebSocketFaults(reorderSends: true, duplicateSends: true, dropAfterSending: 3),
            onConnect: { socket in
                try socket.send("first")
                try socket.send("second")
            }
        )
        try await withTimeout {
            try await withDuplexServer(routes: [fragmenting, shuffling]) { server in
                try await TestWebSocket.with(port: server.port, path: "/fragments") { socket in
                    let frames = [try await socket.receiveFrame(), try await socket.receiveFrame(), try await socket.receiveFrame()]
                    #expect(frames.map(\.fin) == [false, false, true])
                    #expect(frames.map(\.opcode) == [0x1, 0x0, 0x0])
                    #expect(frames.map { String(decoding: $0.payload, as: UTF8.self) } == ["abc", "def", "ghi"])
                }
                try await TestWebSocket.with(port: server.port, path: "/shuffle") { socket in
                    var texts: [String] = []
                    do {
                        while true {
                            let frame = try await socket.receiveFrame()
                            #expect(frame.close == nil)
                            texts.append(frame.text ?? "?")
                        }
                    } catch is TestWebSocket.UnexpectedEnd {}
                    #expect(texts == ["second", "second", "first"])
                }
            }
        }
    }

    @Test("frame faults reach the peer as written: not UTF-8, a reserved opcode, a long ping, a masked frame")
    func frameFaults() async throws {
        let route = ScriptedRoute.webSocket("/bad") { socket in
            for fault in FrameFault.allCases { try socket.send(fault) }
        }
        try await withTimeout {
            try await withDuplexServer(routes: [route]) { server in
                try await TestWebSocket.with(port: server.port, path: "/bad") { socket in
                    let utf8 = try await socket.receiveFrame()
                    #expect(utf8.opcode == 0x1 && String(validating: utf8.payload, as: UTF8.self) == nil)
                    #expect(try await socket.receiveFrame().opcode == 0x3)
                    let ping = try await socket.receiveFrame()
                    #expect(ping.opcode == 0x9 && ping.payload.count == 126)
                }
            }
        }
    }

    @Test("a handler that sends after its close, or closes twice, gets a clear error; one that throws closes with 1011")
    func handlerMisuse() async throws {
        let errors = ErrorBox()
        let route = ScriptedRoute.webSocket("/misuse") { _ in
        } onMessage: { message, socket in
            if message.text == "boom" { throw Boom() }
            try socket.close(code: 4000, reason: "done")
            do { try socket.send("late") } catch { errors.add("\(error)") }
            do { try socket.close() } catch { errors.add("\(error)") }
            do { try socket.close(code: 1005) } catch { errors.add("\(error)") }
        }
        try await withTimeout {
            try await withDuplexServer(routes: [route]) { server in
                try await TestWebSocket.with(port: server.port, path: "/misuse") { socket in
                    try await socket.sendText("go")
                    #expect(try await socket.receiveClose().code == 4000)
                }
                try await TestWebSocket.with(port: server.port, path: "/misuse") { socket in
                    try await socket.sendText("boom")
                    #expect(try await socket.receiveClose().code == 1011)
                }
                let error = try await server.journal.first(within: .seconds(5)) { $0.kind == .error }
                #expect(error.data?.contains("Boom") == true)
            }
        }
        #expect(
            errors.all == [
                "cannot send: the route already closed or dropped this connection",
                "cannot close: the route already closed or dropped this connection",
                "1005 cannot be sent in a close frame (RFC 6455 section 7.4)",
            ])
    }

    @Test("a client that breaks RFC 6455 or the message limit on a scripted route gets its close code, journaled")
    func hostileClients() async throws {
        let route = ScriptedRoute.webSocket("/strict", script: WebSocketScript(onMessage: [ScriptRule(match: .any, do: [.send("ok")])]))
        try await withTimeout {
            try await withDuplexServer(configuration: .init(maxMessageBytes: 1024), routes: [route]) { server in
                try await TestWebSocket.with(port: server.port, path: "/strict") { socket in
                    try await socket.sendFrame(opcode: 0x1, payload: Array("plain".utf8), masked: false)
                    #expect(try await socket.receiveClose().code == 1002)
                }
                try await TestWebSocket.with(port: server.port, path: "/strict") { socket in
                    try await socket.sendBinary(Array(repeating: 1, count: 2048))
                    #expect(try await socket.receiveClose().code == 1009)
                }
                let first = try await server.journal.first(within: .seconds(5)) { $0.kind == .close && $0.code == 1002 }
                #expect(first.direction == .out)
                let second = try await server.journal.first(within: .seconds(5)) { $0.kind == .close && $0.code == 1009 }
                #expect(second.direction == .out)
                #expect(!server.journal.entries.contains { $0.kind == .text && $0.direction == .out }, "nothing was served to either")
            }
        }
    }

    @Test("faults on /echo: each echo twice, then a drop after the third message sent, journaled as a scripted route's")
    func echoFaults() async throws {
        var faulty = DuplexServerConfiguration()
        faulty.echoFaults = try ScriptFile.faults(from: #"{"duplicateSends":true,"dropAfterSending":3}"#)
        #expect(faulty.echoFaults == WebSocketFaults(duplicateSends: true, dropAfterSending: 3))
        let configuration = faulty
        try await withTimeout {
            try await withDuplexServer(configuration: configuration) { server in
                try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                    try await socket.sendText("a")
                    try await socket.sendText("b")
                    var texts: [String] = []
                    do {
                        while true {
                            let frame = try await socket.receiveFrame()
                            #expect(frame.close == nil)
                            texts.append(frame.text ?? "?")
                        }
                    } catch is TestWebSocket.UnexpectedEnd {}
                    #expect(texts == ["a", "a", "b"])
                }
                let drop = try await server.journal.first(within: .seconds(5)) { $0.kind == .drop }
                #expect(drop.path == "/echo" && drop.direction == .out)
            }
        }
    }

    @Test("a client that never answers the route's close frame: TCP closes at the close timeout, journaled as a timeout")
    func closeTimeout() async throws {
        let route = ScriptedRoute.webSocket("/closing", script: WebSocketScript(onConnect: [.close(code: 4002, reason: "go")]))
        try await withTimeout {
            try await withDuplexServer(configuration: .init(closeTimeout: .milliseconds(200)), routes: [route]) { server in
                try await TestWebSocket.with(port: server.port, path: "/closing") { socket in
                    #expect(try await socket.receiveClose().code == 4002)
                    // No answer: the server closes TCP once its close timeout passes.
                    try await socket.waitForEndOfStream()
                }
                let timeout = try await server.journal.first(within: .seconds(5)) { $0.kind == .timeout }
                #expect(timeout.direction == .in)
                let kinds = server.journal.entries.filter { $0.connection == timeout.connection }.map(\.kind)
                #expect(kinds == [.open, .close, .timeout])
            }
        }
    }

    @Test("a scripted route on a built-in path is refused at start, with the path")
    func clashIsRefused() async throws {
        let clash = ScriptedRoute.webSocket("/echo", script: WebSocketScript())
        await #expect(
            throws: DuplexServerError.invalidRoutes("routes[0] (WebSocket /echo) clashes with the built-in route GET /echo: choose another path")
        ) {
            try await withDuplexServer(routes: [clash]) { _ in }
        }
        let room = ScriptedRoute.webSocket("/chat/lobby", script: WebSocketScript())
        await #expect(throws: DuplexServerError.self) {
            try await withDuplexServer(routes: [room]) { _ in }
        }
    }

    @Test("GET /_journal serves the journal as JSON, oldest first; DELETE empties it")
    func journalRoute() async throws {
        try await withTimeout {
            try await withDuplexServer(routes: [Self.feed]) { server in
                try await TestWebSocket.with(port: server.port, path: "/feed") { socket in
                    _ = try await socket.receiveText()
                    try await socket.sendText("note")
                    _ = try await server.journal.first(within: .seconds(5)) { $0.data == "note" }
                }
                let body = try await TestHTTPResponse.get(port: server.port, "/_journal") { response in
                    #expect(response.status == 200)
                    #expect(response.headers.first(name: "Duplex-Journal-Dropped") == "0")
                    return try await response.readBody()
                }
                let entries = try #require(try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [[String: Any]])
                #expect(entries.first?["kind"] as? String == "open")
                #expect(entries.first?["direction"] as? String == "in")
                #expect(entries.contains { $0["data"] as? String == "note" && $0["direction"] as? String == "in" })
                #expect(entries.allSatisfy { $0["at"] is String && $0["connection"] as? Int == 1 })
                try await TestHTTPResponse.get(port: server.port, "/_journal", method: .DELETE) { response in
                    #expect(response.status == 204)
                }
                #expect(server.journal.entries.isEmpty)
            }
        }
    }
}

struct Boom: Error {}

/// Errors collected from a route's handler.
final class ErrorBox: Sendable {
    private let errors = Mutex<[String]>([])
    func add(_ error: String) { errors.withLock { $0.append(error) } }
    var all: [String] { errors.withLock { $0 } }
}
