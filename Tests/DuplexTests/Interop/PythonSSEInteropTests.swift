import Duplex
import DuplexSchema
import DuplexTesting
import Foundation
import Testing

/// The SSE client against a third-party server: Python aiohttp (Tests/Interop/sse_server.py),
/// which `.ci/run` starts and names in DUPLEX_INTEROP_SSE_URL. Skipped when that is not set.
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
            #expect(received.compactMap(\.id) == (1...10).map(String.init), "every response ends after 3 events; the client resumes with Last-Event-ID")
            // A timeout ends the loop early: fail, never index past the end.
            try #require(received.count == 10)
            #expect(received[4] == ServerSentEvent(id: "5", event: "multi", data: "line one\nline two 5"))
            #expect(sse.serverRetry == .milliseconds(50))
            await sse.terminate()
        }
    }
}
