import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Testing

/// Breakpoints on a proxy route: a held message stops its direction until the test forwards,
/// replaces or drops it (injecting before it meanwhile); one left unanswered goes on after its
/// limit; a breakpoint nothing matches times out and is removed.
@Suite("Proxy route breakpoints")
struct ProxyBreakpointTests {
    /// Runs `body` with a proxy route `/p` in front of ``ProxyRouteTests/backend``.
    static func withRoute(
        _ body: @escaping @Sendable (_ route: ScriptedRoute, _ proxy: RunningDuplexServer, _ backend: RunningDuplexServer) async throws -> Void
    ) async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: [ProxyRouteTests.backend]) { backend in
                let route = ScriptedRoute.proxy("/p", to: backend.webSocketURL("/feed"))
                try await withDuplexServer(routes: [route]) { proxy in try await body(route, proxy, backend) }
            }
        }
    }

    @Test("a held message stops its direction: injected messages go before it, its replacement goes on, the later ones follow in order")
    func holdReplaceInject() async throws {
        try await Self.withRoute { route, proxy, _ in
            let socket = WebSocket(request: WebSocketRequest(url: proxy.webSocketURL("/p"), protocols: ["feed.v1"]))
            var messages = socket.messages.makeAsyncIterator()
            let breakpoint = try route.breakpoint(.toClient) { $0.text == #"{"n":3}"# }
            try await socket.connect()
            let held = try await breakpoint.held()
            #expect(held.message == .text(#"{"n":3}"#))
            #expect(held.direction == .toClient)
            #expect(await ProxyRouteTests.texts(&messages, 2) == [#"{"n":1}"#, #"{"n":2}"#])
            // Nothing after the held message reached the client: its direction waits.
            #expect(!proxy.journal.entries.contains { $0.leg == .client && $0.direction == .out && $0.data == #"{"n":4}"# })
            held.inject("notice")
            held.forward(replacing: #"{"n":30}"#)
            #expect(held.isReleased)
            #expect(await ProxyRouteTests.texts(&messages, 4) == ["notice", #"{"n":30}"#, #"{"n":4}"#, #"{"n":5}"#])
            await socket.terminate()
            let entry = try #require(proxy.journal.entries.first { $0.leg == .upstream && $0.direction == .in && $0.data == #"{"n":3}"# })
            #expect(entry.action == #"held at a breakpoint; the test replaced it with "{\"n\":30}"; forward"#)
            #expect(proxy.journal.entries.contains { $0.leg == .client && $0.direction == .out && $0.data == #"{"n":30}"# })
        }
    }

    @Test("a client's message dropped at a breakpoint never reaches the upstream; the next one does")
    func dropUpstream() async throws {
        try await Self.withRoute { route, proxy, backend in
            let socket = WebSocket(request: WebSocketRequest(url: proxy.webSocketURL("/p"), protocols: ["feed.v1"]))
            var messages = socket.messages.makeAsyncIterator()
            try await socket.connect()
            _ = await ProxyRouteTests.texts(&messages, 5)
            let breakpoint = try route.breakpoint(.toUpstream)
            try await socket.send(.string("secret"))
            let held = try await breakpoint.held()
            #expect(held.message.text == "secret")
            held.drop()
            try await socket.send(.string("public"))
            #expect(await ProxyRouteTests.texts(&messages, 1) == ["got:public"])
            await socket.terminate()
            let received = backend.journal.entries.filter { $0.kind == .text && $0.direction == .in }.compactMap(\.data)
            #expect(received == ["public"])
            #expect(proxy.journal.entries.contains { $0.data == "secret" && $0.action == "held at a breakpoint; the test dropped it" })
        }
    }

    @Test("a held message no one answers goes on after the breakpoint's limit, and the journal says so")
    func unanswered() async throws {
        try await Self.withRoute { route, proxy, _ in
            let socket = WebSocket(request: WebSocketRequest(url: proxy.webSocketURL("/p"), protocols: ["feed.v1"]))
            var messages = socket.messages.makeAsyncIterator()
            let breakpoint = try route.breakpoint(.toClient, holdingAtMost: .milliseconds(50)) { $0.text == #"{"n":1}"# }
            try await socket.connect()
            let held = try await breakpoint.held()
            #expect(await ProxyRouteTests.texts(&messages, 5) == (1...5).map { #"{"n":\#($0)}"# })
            #expect(held.isReleased)
            await socket.terminate()
            let entry = try #require(proxy.journal.entries.first { $0.leg == .upstream && $0.data == #"{"n":1}"# })
            #expect(entry.action == "held at a breakpoint; unanswered after 0.05 seconds, let go; forward")
        }
    }

    @Test("a breakpoint nothing matches times out and is removed: later messages flow; a route that is not a proxy refuses")
    func timesOut() async throws {
        try await Self.withRoute { route, proxy, _ in
            await #expect(throws: InterceptTimeoutError.self) {
                _ = try await route.intercept(.toClient, within: .milliseconds(50)) { _ in false }
            }
            let socket = WebSocket(request: WebSocketRequest(url: proxy.webSocketURL("/p"), protocols: ["feed.v1"]))
            var messages = socket.messages.makeAsyncIterator()
            try await socket.connect()
            #expect(await ProxyRouteTests.texts(&messages, 5).count == 5)
            await socket.terminate()
            #expect(throws: ScriptError.self) { _ = try ProxyRouteTests.backend.breakpoint(.toClient) }
        }
    }
}
