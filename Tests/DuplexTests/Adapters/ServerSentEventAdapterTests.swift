#if canImport(Combine)
import Combine
#else
import OpenCombine
#endif
import Duplex
import DuplexCallbacks
import DuplexCombine
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Testing

@Suite("SSE adapters")
struct ServerSentEventAdapterTests {
    @Test("the callback adapter delivers ticks and states")
    func callbacks() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let sse = ServerSentEventCallbackAdapter(url: server.httpURL("/events?interval=20"))
                let (events, eventsInput) = AsyncStream.makeStream(of: ServerSentEvent.self)
                let (states, statesInput) = AsyncStream.makeStream(of: SSEState.self)
                sse.onEvent { eventsInput.yield($0) }
                sse.onStateChange { statesInput.yield($0) }
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    sse.connect { continuation.resume(with: $0) }
                }
                let tick = try await events.first(within: .seconds(5))
                let connected = try await states.first(within: .seconds(5)) { $0 == .connected }
                #expect(tick.event == "tick")
                #expect(connected == .connected)
                sse.terminate()
                let terminated = try await states.first(within: .seconds(5)) { $0 == .disconnected(.terminated) }
                #expect(terminated == .disconnected(.terminated))
            }
        }
    }

    @Test("the publisher adapter delivers ticks")
    func publishers() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let sse = ServerSentEventPublisherAdapter(url: server.httpURL("/events?interval=20"))
                let (events, input) = AsyncStream.makeStream(of: String.self)
                let subscription = sse.events.sink { input.yield($0.event ?? "") }
                let connecting = sse.connect().sink(receiveCompletion: { _ in }, receiveValue: {})
                let first = try await events.first(within: .seconds(5))
                #expect(first == "tick")
                subscription.cancel()
                connecting.cancel()
                sse.terminate()
            }
        }
    }
}
