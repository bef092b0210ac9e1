import Duplex
import DuplexSchema
import DuplexTesting
import Foundation
import TestSupport
import Testing

/// A first `connect()` refused with 429 or 503 and `Retry-After` (issue 61): with a reconnection
/// strategy it waits the server's time and tries again; without one it fails with the status,
/// the wait and what the server said.
@Suite("throttled first connect")
struct ThrottledConnectTests {
    static func busyRoute() -> ScriptedRoute {
        .webSocket(
            "/busy",
            script: WebSocketScript(
                onConnect: [.send("welcome")],
                refuse: ScriptRefusal(status: 429, headers: ["Retry-After": "1"], body: #"{"error":"slow down"}"#, times: 1)
            )
        )
    }

    @Test("with a reconnection strategy, a first connect refused once with 429 and Retry-After: 1 succeeds after about a second")
    func retriedAfterTheServersWait() async throws {
        try await withTimeout {
            try await withDuplexServer(routes: [Self.busyRoute()]) { server in
                let socket = WebSocket(
                    url: server.webSocketURL("/busy"),
                    // The strategy's own first delay is 50 ms; the server's wait (1 s) is within its bounds.
                    configuration: .init(reconnection: .exponentialBackoff(baseDelay: .milliseconds(50), maxDelay: .seconds(5))))
                let messages = socket.messages
                let start = ContinuousClock.now
                try await socket.connect()
                let waited = ContinuousClock.now - start
                #expect(waited >= .milliseconds(900), "it waited the server's Retry-After, not the strategy's 50 ms: \(waited)")
                let welcome = try await messages.first(within: .seconds(5)) { _ in true }
                #expect(welcome.text == "welcome")
                let refusals = server.journal.entries.filter { $0.kind == .refused }
                #expect(refusals.count == 1)
                await socket.terminate()
            }
        }
    }

    @Test("without a reconnection strategy, connect fails with the status, the Retry-After and the body")
    func failsWithWhatTheServerSaid() async throws {
        try await withTimeout {
            try await withDuplexServer(routes: [Self.busyRoute()]) { server in
                let socket = WebSocket(url: server.webSocketURL("/busy"))
                await #expect {
                    try await socket.connect()
                } throws: { error in
                    guard let error = error as? WebSocketError else { return false }
                    return error.code == .upgradeRejected && error.status == 429 && error.retryAfter == .seconds(1)
                        && error.body == #"{"error":"slow down"}"# && error.description.contains("slow down")
                }
                await socket.terminate()
            }
        }
    }
}
