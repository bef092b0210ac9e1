import Duplex
import DuplexTesting
import NIOConcurrencyHelpers
import Testing

/// The test clock alone, moved by `advance`: sleeps end in the order of their deadlines (then of
/// their start), only once the time reaches them, `advance` returns once the tasks it woke (on the
/// clock's executor) have run, and a cancelled sleep throws at once.
@Suite struct TestClockTests {
    @Test func advanceEndsTheSleepsDueInOrder() async throws {
        let clock = TestClock()
        let ended = NIOLockedValueBox<[String]>([])
        let sleepers = [("b", 20), ("a", 10), ("c", 20), ("d", 90)].map { name, seconds in
            Task(executorPreference: clock.executor) {
                try await clock.sleep(for: .seconds(seconds))
                ended.withLockedValue { $0.append("\(name) at \(clock.now)") }
            }
        }
        // Nothing is due yet; once the executor has nothing left, all four wait.
        await clock.advance(by: .zero)
        #expect(clock.scheduledCount == 4)
        await clock.advance(by: .seconds(15))
        try await sleepers[1].value
        #expect(ended.withLockedValue { $0 } == ["a at 10.000s"])
        await clock.advance(by: .seconds(15))
        try await sleepers[0].value
        try await sleepers[2].value
        #expect(ended.withLockedValue { $0 } == ["a at 10.000s", "b at 20.000s", "c at 20.000s"])
        #expect(clock.now == TestClock.Instant(offset: .seconds(30)))
        #expect(clock.scheduledCount == 1)
        sleepers[3].cancel()
        await #expect(throws: CancellationError.self) { try await sleepers[3].value }
        #expect(clock.scheduledCount == 0)
    }

    @Test func aSleepAlreadyDueEndsAtOnce() async throws {
        let clock = TestClock()
        await clock.advance(by: .seconds(5))
        try await clock.sleep(until: TestClock.Instant(offset: .seconds(1)))
        try await clock.sleep(for: .zero)
        #expect(clock.now.offset == .seconds(5))
    }
}

/// A simulated test that waits for what cannot come is told so, with its seed, instead of hanging.
@Suite struct SimulationStallTests {
    @Test func waitingForAMessageNoOneSendsStalls() async throws {
        let started = ContinuousClock.now
        await #expect {
            try await withSimulatedNetwork(seed: 8, stallTimeout: .milliseconds(200)) { network, clock in
                _ = network.server(host: "silent.test")
                let socket = network.webSocket(url: "ws://silent.test/", configuration: .init(reconnection: .none))
                let messages = socket.messages
                try await socket.connect()
                try await clock.sleep(for: .seconds(60))
                // The echo server sends nothing unasked: this waits for ever.
                for await _ in messages { break }
            }
        } throws: { error in
            guard let stalled = error as? SimulationStalled else { return false }
            return stalled.seed == 8 && stalled.at.offset == .seconds(60) && stalled.lastEvents.contains { $0.hasSuffix("c1#1 open") }
        }
        #expect(ContinuousClock.now - started < .seconds(10))
    }
}
