#if canImport(Combine)
import Combine
#else
import OpenCombine
#endif
import Duplex
import DuplexCombine
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

@Suite("Combine adapter")
struct CombineAdapterTests {
    /// Collects what a publisher emits, and lets a test wait for it.
    final class Sink<Value: Sendable>: @unchecked Sendable {
        // @unchecked: the cancellable is set once, before anything reads it; values go through the stream.
        let (values, input) = AsyncStream.makeStream(of: Value.self)
        var cancellable: AnyCancellable?
    }

    @Test("connect, send, messages and states through publishers, against the real server")
    func publishers() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let ws = WebSocketPublisherAdapter(url: server.webSocketURL("/echo"))
                let messages = Sink<String>()
                messages.cancellable = ws.messages.sink { messages.input.yield($0.text ?? "") }
                let states = Sink<WebSocketState>()
                states.cancellable = ws.stateEvents.sink { states.input.yield($0) }
                let done = Sink<String>()
                done.cancellable = ws.connect()
                    .flatMap { ws.send(.string("via combine")) }
                    .sink(
                        receiveCompletion: { completion in
                            if case .failure(let error) = completion { done.input.yield("failed: \(error)") } else { done.input.yield("finished") }
                        }, receiveValue: { done.input.yield("value") })
                let value = try await done.values.first(within: .seconds(5))
                let completion = try await done.values.first(within: .seconds(5))
                let echoed = try await messages.values.first(within: .seconds(5))
                let connected = try await states.values.first(within: .seconds(5)) { $0 == .connected(protocol: nil) }
                #expect(value == "value" && completion == "finished")
                #expect(echoed == "via combine")
                #expect(connected == .connected(protocol: nil))
                ws.terminate()
                let terminated = try await states.values.first(within: .seconds(5)) { $0 == .disconnected(.terminated) }
                #expect(terminated == .disconnected(.terminated))
            }
        }
    }

    @Test("a failing operation fails its publisher with the socket's error")
    func failure() async throws {
        try await withTimeout {
            let ws = WebSocketPublisherAdapter(url: URL(string: "ws://127.0.0.1:1/")!)
            let result = Sink<String>()
            result.cancellable = ws.send(.string("nowhere")).sink(
                receiveCompletion: { completion in
                    if case .failure(let error) = completion { result.input.yield("\((error as? WebSocketError)?.code.description ?? "?")") }
                }, receiveValue: {})
            let code = try await result.values.first(within: .seconds(5))
            #expect(code == "notConnected")
        }
    }
}
