import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Testing
import TestSupport

/// Proxy routes in front of a real backend (here, another server in the same process with a
/// route of its own protocol): the upstream's handshake first, messages both ways through the
/// rules of each direction, closes and drops passed on, refusals relayed, and both legs journaled.
@Suite("Proxy routes")
struct ProxyRouteTests {
    /// The "real backend": sends `{"n":1}` … `{"n":5}` on connect, answers each message with
    /// `got:` and the message, and refuses a request whose `Authorization` is `Bearer no`.
    static let backend = ScriptedRoute.webSocket("/feed", subprotocols: ["feed.v1"]) { socket in
        for n in 1...5 { try socket.send(#"{"n":\#(n)}"#) }
    } onMessage: { message, socket in
        try socket.send("got:" + (message.text ?? ""))
    } accept: { request in
        request.headers.contains { $0.name.lowercased() == "authorization" && $0.value == "Bearer no" }
            ? .refuse(
                status: 403, headers: ["WWW-Authenticate": #"Bearer error="invalid_token""#, "X-Request-Id": "r-7"], body: #"{"error":"not you"}"#)
            : .accept
    }

    /// Runs `body` with a backend server and a server whose `/p` proxies to its `/feed`.
    static func withProxy(
        toUpstream: [ProxyRule] = [], toClient: [ProxyRule] = [],
        _ body: @escaping @Sendable (_ proxy: RunningDuplexServer, _ backend: RunningDuplexServer) async throws -> Void
    ) async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: [backend]) { backend in
                let route = ScriptedRoute.proxy("/p", to: backend.webSocketURL("/feed"), toUpstream: toUpstream, toClient: toClient)
                try await withDuplexServer(routes: [route]) { proxy in try await body(proxy, backend) }
            }
        }
    }

    /// The next `count` text messages.
    static func texts(_ messages: inout AsyncStream<WebSocketMessage>.Iterator, _ count: Int) async -> [String] {
        var texts: [String] = []
        while texts.count < count, let message = await messages.next() {
            if case .string(let text) = message { texts.append(text) }
        }
        return texts
    }

    @Test("pass-through: the upstream's subprotocol, the client's headers and query go upstream, messages both ways, both legs journaled")
    func passThrough() async throws {
        try await Self.withProxy { proxy, backend in
            let socket = WebSocket(
                request: WebSocketRequest(
                    url: URL(string: proxy.webSocketURL("/p").absoluteString + "?token=7")!, protocols: ["other", "feed.v1"],
                    additionalHeaders: ["Authorization": "Bearer yes", "Origin": "http://app.test"]))
            var messages = socket.messages.makeAsyncIterator()
            try await socket.connect()
            #expect(socket.negotiatedProtocol == "feed.v1")
            #expect(await Self.texts(&messages, 5) == (1...5).map { #"{"n":\#($0)}"# })
            try await socket.send(.string("hello"))
            #expect(await Self.texts(&messages, 1) == ["got:hello"])
            await socket.disconnect(code: .normalClosure, reason: "done")

            let open = try #require(backend.journal.entries.first { $0.kind == .open }?.request)
            #expect(open.queryItem("token") == "7")
            #expect(open.subprotocols == ["other", "feed.v1"])
            #expect(open.headers.contains { $0.name.lowercased() == "authorization" && $0.value == "Bearer yes" })
            #expect(open.headers.contains { $0.name.lowercased() == "origin" && $0.value == "http://app.test" })
            // The backend's own close, as the client sent it.
            let closed = try await backend.journal.first(within: .seconds(10)) { $0.kind == .close && $0.direction == .in }
            #expect(closed.code == 1000)

            let legs = proxy.journal.entries.filter { $0.kind == .text }.map { "\($0.leg!.rawValue) \($0.direction.rawValue) \($0.data!)" }
            #expect(legs.contains("client in hello"))
            #expect(legs.contains("upstream out hello"))
            #expect(legs.contains("upstream in got:hello"))
            #expect(legs.contains("client out got:hello"))
            #expect(proxy.journal.entries.first { $0.kind == .open }?.request?.subprotocol == "feed.v1")
        }
    }

    @Test("rules: nth 3 held back toward the client; set, reply and send toward the upstream, in order")
    func rules() async throws {
        try await Self.withProxy(
            toUpstream: [
                ProxyRule(match: .text("ping"), do: [.reply("pong"), .forward(false)]),
                ProxyRule(match: try .json(#"{"type":"order"}"#), do: [try .set(#"{"price":0}"#)]),
                ProxyRule(match: .text("hi"), do: [.send("injected")]),
            ],
            toClient: [ProxyRule(match: .nth(3), do: [.forward(false)])]
        ) { proxy, backend in
            let socket = WebSocket(request: WebSocketRequest(url: proxy.webSocketURL("/p")))
            var messages = socket.messages.makeAsyncIterator()
            try await socket.connect()
            #expect(await Self.texts(&messages, 4) == [#"{"n":1}"#, #"{"n":2}"#, #"{"n":4}"#, #"{"n":5}"#])
            try await socket.send(.string(#"{"type":"order","price":5}"#))
            #expect(await Self.texts(&messages, 1) == [#"got:{"price":0,"type":"order"}"#])
            try await socket.send(.string("ping"))
            #expect(await Self.texts(&messages, 1) == ["pong"])
            try await socket.send(.string("hi"))
            #expect(await Self.texts(&messages, 2) == ["got:injected", "got:hi"])
            await socket.disconnect(code: .normalClosure, reason: "")
            let received = backend.journal.entries.filter { $0.kind == .text && $0.direction == .in }.compactMap(\.data)
            #expect(received == [#"{"price":0,"type":"order"}"#, "injected", "hi"], "the upstream never saw ping")
            let held = try #require(proxy.journal.entries.first { $0.leg == .upstream && $0.direction == .in && $0.data == #"{"n":3}"# })
            #expect(held.action?.contains("hold back") == true)
        }
    }

    @Test("a rule's close reaches the client with its code, the upstream's with 1000")
    func closeRule() async throws {
        try await Self.withProxy(toUpstream: [ProxyRule(match: .text("quit"), do: [.close(code: 4001, reason: "bye")])]) { proxy, backend in
            try await TestWebSocket.with(port: proxy.port, path: "/p") { socket in
                #expect(try await socket.receiveText() == #"{"n":1}"#)
                try await socket.sendText("quit")
                let close = try await socket.receiveClose()
                #expect(close.code == 4001)
                #expect(close.reason == "bye")
            }
            let closed = try await backend.journal.first(within: .seconds(10)) { $0.kind == .close && $0.direction == .in }
            #expect(closed.code == 1000)
            #expect(!backend.journal.entries.contains { $0.data == "quit" })
        }
    }

    @Test("a rule's drop ends the client's connection and the upstream's, both with no close frame")
    func dropRule() async throws {
        try await Self.withProxy(toUpstream: [ProxyRule(match: .text("vanish"), do: [.drop])]) { proxy, backend in
            try await TestWebSocket.with(port: proxy.port, path: "/p") { socket in
                #expect(try await socket.receiveText() == #"{"n":1}"#)
                try await socket.sendText("vanish")
                var frames: [TestWebSocket.Frame] = []
                do {
                    while true { frames.append(try await socket.receiveFrame()) }
                } catch is TestWebSocket.UnexpectedEnd {}
                #expect(frames.allSatisfy { $0.close == nil })
            }
            // The upstream's connection ends with no close frame either.
            let ended = try await backend.journal.first(within: .seconds(10)) { [.close, .drop].contains($0.kind) && $0.direction == .in }
            #expect(ended.kind == .drop)
            #expect(proxy.journal.entries.contains { $0.kind == .drop && $0.leg == .client && $0.direction == .out })
        }
    }

    @Test("the upstream's close is passed to the client with its code")
    func upstreamCloses() async throws {
        let closing = ScriptedRoute.webSocket("/closing", script: WebSocketScript(onConnect: [.send("last"), .close(code: 4409, reason: "gone")]))
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: [closing]) { backend in
                try await withDuplexServer(routes: [.proxy("/p", to: backend.webSocketURL("/closing"))]) { proxy in
                    try await TestWebSocket.with(port: proxy.port, path: "/p") { socket in
                        #expect(try await socket.receiveText() == "last")
                        let close = try await socket.receiveClose()
                        #expect(close.code == 4409)
                        #expect(close.reason == "gone")
                    }
                }
            }
        }
    }

    @Test("an upstream refusal is relayed as is: status, headers, body")
    func upstreamRefuses() async throws {
        try await Self.withProxy { proxy, _ in
            try await TestWebSocket.with(port: proxy.port, path: "/p", extraHeaders: ["Authorization: Bearer no"]) { socket in
                #expect(socket.status == 403)
            }
            let socket = WebSocket(request: WebSocketRequest(url: proxy.webSocketURL("/p"), additionalHeaders: ["Authorization": "Bearer no"]))
            let error = await #expect(throws: WebSocketError.self) { try await socket.connect() }
            #expect(error?.status == 403)
            #expect(error?.body == #"{"error":"not you"}"#)
            let headers = Dictionary((error?.headers ?? []).map { ($0.name.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
            #expect(headers["www-authenticate"] == #"Bearer error="invalid_token""#)
            #expect(headers["x-request-id"] == "r-7")
            #expect(headers["content-type"] == "application/json")
            await socket.terminate()
        }
    }

    @Test("an upstream that is down answers the upgrade 502, saying why")
    func upstreamDown() async throws {
        let down = try RefusingPort()
        let route = ScriptedRoute.proxy("/p", to: URL(string: "ws://127.0.0.1:\(down.port)/feed")!)
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: [route]) { proxy in
                let socket = WebSocket(request: WebSocketRequest(url: proxy.webSocketURL("/p")))
                let error = await #expect(throws: WebSocketError.self) { try await socket.connect() }
                #expect(error?.status == 502)
                #expect(error?.body?.contains("refused the connection") == true)
                await socket.terminate()
                let refused = try await proxy.journal.first(within: .seconds(5)) { $0.kind == .refused }
                #expect(refused.code == 502)
            }
        }
    }

    @Test("a delay holds back the later messages of its direction: order is kept")
    func delayKeepsOrder() async throws {
        try await Self.withProxy(toClient: [ProxyRule(match: .nth(1), do: [.delay(.milliseconds(100))])]) { proxy, _ in
            let socket = WebSocket(request: WebSocketRequest(url: proxy.webSocketURL("/p")))
            var messages = socket.messages.makeAsyncIterator()
            try await socket.connect()
            #expect(await Self.texts(&messages, 5) == (1...5).map { #"{"n":\#($0)}"# })
            await socket.terminate()
        }
    }

    @Test("a client that closes while a delay holds its last messages back: they reach the upstream, in order, before its close")
    func closeDuringDelay() async throws {
        try await Self.withProxy(toUpstream: [ProxyRule(match: .text("slow"), do: [.delay(.milliseconds(200))])]) { proxy, backend in
            try await TestWebSocket.with(port: proxy.port, path: "/p") { socket in
                #expect(try await socket.receiveText() == #"{"n":1}"#)
                // In one write, so that the proxy reads the close while the rules hold "slow".
                let close = [UInt8(4000 >> 8), UInt8(4000 & 0xFF)] + Array("done".utf8)
                try await socket.writeRaw(
                    TestWebSocket.frame(opcode: 0x1, payload: Array("slow".utf8)) + TestWebSocket.frame(opcode: 0x1, payload: Array("after".utf8))
                        + TestWebSocket.frame(opcode: 0x8, payload: close))
                _ = try await socket.receiveClose()
            }
            let closed = try await backend.journal.first(within: .seconds(10)) { $0.kind == .close && $0.direction == .in }
            #expect(closed.code == 4000)
            let arrived = backend.journal.entries.filter { $0.direction == .in && [.text, .close].contains($0.kind) }
            #expect(arrived.map { $0.data ?? "close" } == ["slow", "after", "close"])
        }
    }

    @Test("toward the client: a message in 3 frames, a frame it must reject (its 1007 passed upstream); pongs withheld after a rule says so")
    func frameFaults() async throws {
        try await Self.withProxy(
            toUpstream: [ProxyRule(match: .text("mute"), do: [.answerPings(false), .forward(false)])],
            toClient: [ProxyRule(match: .nth(2), do: [.fragment(frames: 3)]), ProxyRule(match: .nth(6), do: [.fault(.invalidUTF8)])]
        ) { proxy, backend in
            try await TestWebSocket.with(port: proxy.port, path: "/p") { socket in
                #expect(try await socket.receiveText() == #"{"n":1}"#)
                let frames = [try await socket.receiveFrame(), try await socket.receiveFrame(), try await socket.receiveFrame()]
                #expect(frames.map(\.fin) == [false, false, true])
                #expect(frames.map(\.opcode) == [0x1, 0x0, 0x0])
                #expect(String(decoding: frames.flatMap(\.payload), as: UTF8.self) == #"{"n":2}"#)
                #expect(await Self.rawTexts(socket, 3) == [#"{"n":3}"#, #"{"n":4}"#, #"{"n":5}"#])
                // Pongs: answered, then withheld once "mute" went by.
                try await socket.sendFrame(opcode: 0x9, payload: Array("one".utf8))
                let pong = try await socket.receiveFrame()
                #expect(pong.opcode == 0xA && pong.payload == Array("one".utf8))
                try await socket.sendText("mute")
                try await socket.sendFrame(opcode: 0x9, payload: Array("two".utf8))
                try await socket.sendText("after")
                // The upstream's answer to "after" comes with the fault before it, and no pong.
                let fault = try await socket.receiveFrame()
                #expect(fault.opcode == 0x1 && fault.payload == [0x68, 0x69, 0xC3, 0x28])
                #expect(try await socket.receiveText() == "got:after")
                try await socket.sendClose(code: 1007)
                _ = try await socket.receiveClose()
            }
            let closed = try await backend.journal.first(within: .seconds(10)) { $0.kind == .close && $0.direction == .in }
            #expect(closed.code == 1007)
            #expect(proxy.journal.entries.contains { $0.kind == .ping && $0.data == "two" && $0.action == "pong withheld" })
            #expect(proxy.journal.entries.contains { $0.kind == .fault && $0.data == "invalidUTF8" && $0.leg == .client })
        }
    }

    /// The next `count` text messages of a raw socket, skipping pings and pongs.
    static func rawTexts(_ socket: TestWebSocket, _ count: Int) async -> [String] {
        var texts: [String] = []
        while texts.count < count, let text = try? await socket.receiveText() { texts.append(text) }
        return texts
    }
}

extension ProxyRouteTests {
    @Test(
        "over TLS, HTTP/2 and HTTP/1.1: a proxy route answers once its wss upstream (trusted by its CA) answered: the subprotocol, the messages, a refusal, a 502",
        arguments: [HTTPVersionPreference.http2, .http1])
    func overTLS(_ version: HTTPVersionPreference) async throws {
        var tls = DuplexServerConfiguration(port: 0)
        tls.tls = try .selfSigned()
        let configuration = tls
        let pem = try #require(configuration.tls?.certificateAuthorityPEM)
        let trust = TLSTrust.certificateAuthority(pem: pem)
        let down = try RefusingPort()
        try await withTimeout(.seconds(30)) {
            // The backend over TLS, with the same certificate: the proxy trusts its CA.
            try await withDuplexServer(configuration: configuration, routes: [Self.backend]) { backend in
                var upstreamOverHTTP2 = ProxyScript(upstream: backend.webSocketURL("/feed"), tlsTrust: trust)
                upstreamOverHTTP2.httpVersion = .http2
                let routes = [
                    ScriptedRoute.proxy(
                        "/p",
                        script: ProxyScript(
                            upstream: backend.webSocketURL("/feed"), toClient: [ProxyRule(match: .nth(2), do: [.forward(false)])], tlsTrust: trust)),
                    ScriptedRoute.proxy("/down", to: URL(string: "ws://127.0.0.1:\(down.port)/feed")!),
                    ScriptedRoute.proxy("/h2", script: upstreamOverHTTP2),
                ]
                try await withDuplexServer(configuration: configuration, routes: routes) { proxy in
                    var client = WebSocketConfiguration(tlsTrust: trust)
                    client.httpVersion = version
                    let socket = WebSocket(
                        request: WebSocketRequest(url: proxy.webSocketURL("/p"), protocols: ["feed.v1"]), configuration: client)
                    var messages = socket.messages.makeAsyncIterator()
                    try await socket.connect()
                    #expect(socket.negotiatedProtocol == "feed.v1")
                    #expect(await Self.texts(&messages, 4) == [#"{"n":1}"#, #"{"n":3}"#, #"{"n":4}"#, #"{"n":5}"#])
                    try await socket.send(.string("x"))
                    #expect(await Self.texts(&messages, 1) == ["got:x"])
                    await socket.terminate()
                    #expect(proxy.journal.entries.first { $0.kind == .open }?.request?.method == (version == .http2 ? "CONNECT" : "GET"))

                    let refused = WebSocket(
                        request: WebSocketRequest(url: proxy.webSocketURL("/p"), additionalHeaders: ["Authorization": "Bearer no"]),
                        configuration: client)
                    let error = await #expect(throws: WebSocketError.self) { try await refused.connect() }
                    #expect(error?.status == 403)
                    #expect(error?.body == #"{"error":"not you"}"#)
                    #expect(error?.headers.contains { $0.name.lowercased() == "x-request-id" && $0.value == "r-7" } == true)
                    await refused.terminate()

                    let unreachable = WebSocket(url: proxy.webSocketURL("/down"), configuration: client)
                    let failed = await #expect(throws: WebSocketError.self) { try await unreachable.connect() }
                    #expect(failed?.status == 502)
                    await unreachable.terminate()

                    // The upstream asked over HTTP/2: an extended CONNECT reaches the backend.
                    let overH2 = WebSocket(request: WebSocketRequest(url: proxy.webSocketURL("/h2"), protocols: ["feed.v1"]), configuration: client)
                    var h2Messages = overH2.messages.makeAsyncIterator()
                    try await overH2.connect()
                    #expect(await Self.texts(&h2Messages, 1) == [#"{"n":1}"#])
                    await overH2.terminate()
                    #expect(backend.journal.entries.contains { $0.kind == .open && $0.request?.method == "CONNECT" })
                }
            }
        }
    }
}
