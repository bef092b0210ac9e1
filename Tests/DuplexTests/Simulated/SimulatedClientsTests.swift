import Duplex
import DuplexTesting
import Foundation
import Testing

/// The clients beyond `WebSocket` on the simulated network's clock: seed 001's reconnecting
/// wrapper and the chat client.
extension SimulatedTimeTests {
    /// The wrapper makes a new socket for each connection, with its strategy's waits in between,
    /// all on the network's clock: ten outages of a minute, in milliseconds of wall time.
    @Test func theReconnectingWrapperWaitsOutItsStrategyOnTheClock() async throws {
        try await withSimulatedNetwork(seed: 31, link: Self.link) { network, clock in
            let server = network.server(host: "wrapped.test")
            let socketConfiguration = network.configure(WebSocketConfiguration(reconnection: .none, logger: Self.quiet))
            let url = try #require(URL(string: "ws://wrapped.test/"))
            let wrapper = ReconnectingWebSocket(
                connect: { WebSocket(request: WebSocketRequest(url: url), configuration: socketConfiguration, clock: clock) },
                strategy: network.configure(.exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30), jitter: 0.2)),
                logger: Self.quiet,
                clock: clock
            )
            try await wrapper.connect()
            for _ in 0..<10 {
                server.restart(downFor: .seconds(60))
                try await clock.sleep(for: .seconds(120))
            }
            #expect(wrapper.state == .connected(protocol: nil))
            #expect(server.acceptedCount == 11)
            #expect(clock.now.offset >= .seconds(1200))
            let waits = Self.retryWaits(network.eventLines)
            #expect(waits.count >= 50, "\(waits)")
            for wait in waits {
                #expect(wait >= .milliseconds(800) && wait <= .seconds(36), "a wait of \(wait) is outside 1 s - 20% ... 30 s + 20%")
            }
            await wrapper.terminate()
        }
    }

    /// A chat server that never welcomes: `join(timeout:)` gives up after its ten seconds of the
    /// network's time, not of the machine's.
    @Test func aChatJoinTimesOutOnTheClock() async throws {
        try await withSimulatedNetwork(seed: 32, link: Self.link) { network, clock in
            let server = network.server(host: "chat.test")
            server.respond { _ in [] }  // silent: no welcome
            let client = ChatClient(
                url: try #require(URL(string: "ws://chat.test/chat/lobby")), name: "ada",
                configuration: network.configure(WebSocketConfiguration(reconnection: .none, logger: Self.quiet)), clock: clock)
            let started = clock.now
            await #expect(throws: WebSocketError.self) { try await client.join(timeout: .seconds(10)) }
            let waited = started.duration(to: clock.now)
            #expect(waited >= .seconds(10) && waited < .seconds(10.1), "\(waited)")
            await client.leave()
        }
    }
}
