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
import NIOConcurrencyHelpers
import NIOHTTP1
import Testing
import TestSupport

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

    @Test("a POST stream through either adapter: the body arrives, the events publisher completes at [DONE], the callback adapter sees streamEnded")
    func postThroughAdapters() async throws {
        try await withTimeout {
            let peer = try await ScriptedHTTPPeer.start { _ in .init(chunks: ["data: a\n\n", "data: [DONE]\n\n"], stall: true) }
            defer { Task { await peer.stop() } }
            let request = SSERequest(url: URL(string: "http://127.0.0.1:\(peer.port)/v1")!, method: .post, body: Data("q".utf8), terminalEvent: .done)

            let publisher = ServerSentEventPublisherAdapter(request: request)
            let (completed, input) = AsyncStream.makeStream(of: [String].self)
            let received = NIOLockedValueBox<[String]>([])
            let subscription = publisher.events.sink(
                receiveCompletion: { _ in input.yield(received.withLockedValue { $0 }) },
                receiveValue: { event in received.withLockedValue { $0.append(event.data) } }
            )
            let connecting = publisher.connect().sink(receiveCompletion: { _ in }, receiveValue: {})
            #expect(try await completed.first(within: .seconds(5)) == ["a", "[DONE]"], "the publisher completes when the stream finishes")
            #expect(publisher.manager.hasFinished)
            subscription.cancel()
            connecting.cancel()

            let callbacks = ServerSentEventCallbackAdapter(request: request)
            let (states, statesInput) = AsyncStream.makeStream(of: SSEState.self)
            callbacks.onStateChange { statesInput.yield($0) }
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                callbacks.connect { continuation.resume(with: $0) }
            }
            #expect(try await states.first(within: .seconds(5)) { $0 == .disconnected(.streamEnded) } == .disconnected(.streamEnded))
            #expect(callbacks.manager.hasFinished)
            #expect(peer.received.map(\.method) == [.POST, .POST])
            #expect(peer.received.map(\.body) == ["q", "q"])
        }
    }
}
