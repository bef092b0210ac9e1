#if canImport(Combine)
import Combine
#else
import OpenCombine
#endif
import Duplex
import DuplexCallbacks
import DuplexCombine
import DuplexSchema
import DuplexTesting
import Foundation
import Testing

/// The callback and Combine adapters against a scripted route: its greeting, then a drop after
/// its reply, which both report as a disconnection with no close frame.
@Suite("Adapters against scripted routes")
struct ScriptedAdapterTests {
    static let greeter = ScriptedRoute.webSocket(
        "/greeter",
        script: WebSocketScript(
            onConnect: [.send("hello")],
            onMessage: [ScriptRule(match: .any, do: [.send("bye"), .drop])]
        ))

    static func isDropped(_ state: WebSocketState) -> Bool {
        if case .disconnected(let reason) = state, reason != .manuallyDisconnected, reason != .terminated { true } else { false }
    }

    @Test("the callback adapter gets the greeting and the reply, then sees the drop")
    func callbacks() async throws {
        try await withTimeout {
            try await withDuplexServer(routes: [Self.greeter]) { server in
                let adapter = WebSocketCallbackAdapter(url: server.webSocketURL("/greeter"))
                let (received, receivedInput) = AsyncStream.makeStream(of: String.self)
                let (states, statesInput) = AsyncStream.makeStream(of: WebSocketState.self)
                adapter.onMessage { receivedInput.yield($0.text ?? "") }
                adapter.onStateChange { statesInput.yield($0) }
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    adapter.connect { continuation.resume(with: $0) }
                }
                var texts = received.makeAsyncIterator()
                #expect(await texts.next() == "hello")
                try await withCheckedThrowingContinuation { continuation in
                    adapter.send(.string("hi")) { continuation.resume(with: $0) }
                }
                #expect(await texts.next() == "bye")
                let dropped = try await states.first(within: .seconds(10), where: Self.isDropped)
                #expect(dropped == .disconnected(.closed(code: .abnormalClosure, reason: "")))
                adapter.terminate()
                let drop = try await server.journal.first(within: .seconds(5)) { $0.kind == .drop }
                #expect(drop.direction == .out)
            }
        }
    }

    @Test("the Combine adapter publishes the greeting and the reply, then the drop")
    func combine() async throws {
        try await withTimeout {
            try await withDuplexServer(routes: [Self.greeter]) { server in
                let ws = WebSocketPublisherAdapter(url: server.webSocketURL("/greeter"))
                let messages = CombineAdapterTests.Sink<String>()
                messages.cancellable = ws.messages.sink { messages.input.yield($0.text ?? "") }
                let states = CombineAdapterTests.Sink<WebSocketState>()
                states.cancellable = ws.stateEvents.sink { states.input.yield($0) }
                let sent = CombineAdapterTests.Sink<String>()
                sent.cancellable = ws.connect()
                    .flatMap { ws.send(.string("hi")) }
                    .sink(receiveCompletion: { _ in sent.input.yield("done") }, receiveValue: {})
                var texts = messages.values.makeAsyncIterator()
                #expect(await texts.next() == "hello")
                #expect(await texts.next() == "bye")
                let dropped = try await states.values.first(within: .seconds(10), where: Self.isDropped)
                #expect(dropped == .disconnected(.closed(code: .abnormalClosure, reason: "")))
                ws.terminate()
            }
        }
    }
}
