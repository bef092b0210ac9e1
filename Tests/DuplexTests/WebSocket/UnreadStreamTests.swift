import Duplex
import DuplexSchema
import DuplexTesting
import Foundation
import TestSupport
import Testing

/// A protocol error closes the connection at once, whatever the app reads (issue 61): a
/// `messages` stream asked for and never read does not hold the close back.
@Suite("protocol errors with an unread stream")
struct UnreadStreamTests {
    @Test("a text frame that is not UTF-8 closes with 1007 at once while an unread messages stream is held; the stream keeps what came before")
    func closesAtOnce() async throws {
        let route = ScriptedRoute.webSocket("/bad") { socket in
            try socket.send("before")
            try socket.send(.invalidUTF8)
        }
        try await withTimeout {
            try await withDuplexServer(routes: [route]) { server in
                // A close timeout far above the bound below: waiting for the unread stream would
                // take all of it.
                let socket = WebSocket(url: server.webSocketURL("/bad"), configuration: .init(closeTimeout: .seconds(30)))
                let messages = socket.messages
                try await socket.connect()
                let closed = try await server.journal.first(within: .seconds(10)) { $0.kind == .close && $0.direction == .in }
                #expect(closed.code == 1007)
                let fault = try #require(server.journal.entries.first { $0.kind == .fault })
                let delay = closed.at.timeIntervalSince(fault.at)
                // At once: about 50 ms on an idle machine (the wait for a stream not read yet),
                // up to 2 s seen on a loaded CI machine running every suite at once; the bound
                // tells that from the 30 s close timeout the close used to wait, not the speed.
                #expect(delay < 10, "closed \(delay) s after the bad frame")
                let first = try await messages.first(within: .seconds(5))
                #expect(first.text == "before", "what came before the bad frame is still in the stream")
                await socket.terminate()
            }
        }
    }
}
