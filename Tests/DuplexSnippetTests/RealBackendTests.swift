import Duplex
import DuplexTesting
import Foundation
import Testing

@Test func aQuoteHeldAndRewritten() async throws {
    try await withMyBackend { backendURL in  // your backend, running: a local build, a container
        let quotes = ScriptedRoute.proxy(
            "/quotes", to: backendURL,
            toUpstream: [ProxyRule(match: .text("bye"), do: [.close(code: 4001, reason: "bye")])]
        )
        try await withDuplexServer(routes: [quotes]) { server in
            let socket = WebSocket(url: server.webSocketURL("/quotes"))
            var messages = socket.messages.makeAsyncIterator()
            // Set before the message can come: it holds the first quote the backend sends.
            let breakpoint = try quotes.breakpoint(.toClient) { $0.text?.contains("quote") == true }
            try await socket.connect()
            let held = try await breakpoint.held(within: .seconds(5))
            held.inject(#"{"type":"notice"}"#)
            held.forward(replacing: #"{"type":"quote","price":0}"#)
            #expect(await messages.next()?.text == #"{"type":"notice"}"#)
            #expect(await messages.next()?.text == #"{"type":"quote","price":0}"#)
            try await socket.send("bye")  // closed by the rule: the backend never sees it
            let journal = server.journal.entries.filter { $0.leg == .upstream }
            #expect(journal.contains { $0.direction == .in && $0.data == #"{"type":"quote","price":42}"# })
            await socket.terminate()
        }
    }
}

/// The backend of this test: a route that sends one quote. Yours is your real server.
func withMyBackend(_ body: @escaping @Sendable (URL) async throws -> Void) async throws {
    let backend = ScriptedRoute.webSocket("/quotes") { socket in try socket.send(#"{"type":"quote","price":42}"#) }
    try await withDuplexServer(routes: [backend]) { server in try await body(server.webSocketURL("/quotes")) }
}
