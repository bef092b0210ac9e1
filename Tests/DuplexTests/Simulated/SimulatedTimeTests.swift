import Duplex
import DuplexTesting
import Foundation
import Logging
import NIOConcurrencyHelpers
import Testing

/// The card's time-based behaviours on a simulated network: hours of virtual time, in well under
/// a second of wall time, the same seed giving the same event log.
@Suite struct SimulatedTimeTests {
    /// An hour of a server that goes down for a minute every two: the client reconnects after
    /// each outage, every wait within the strategy's cap and jitter.
    @Test func reconnectsAcrossAnHourOfAFlappingServer() async throws {
        let log = try await Self.flappingHour(seed: 7)
        let reconnections = log.filter { $0.hasSuffix(" open") }.count - 1
        #expect(reconnections >= 30, "\(reconnections) reconnections")
        // The waits the client chose: from a refusal or a drop to the next attempt.
        let waits = Self.retryWaits(log)
        #expect(waits.count > 100)
        for wait in waits {
            #expect(wait >= .milliseconds(800) && wait <= .seconds(36), "a wait of \(wait) is outside 1 s - 20% ... 30 s + 20%: \(log)")
        }
        #expect(waits.filter { $0 >= .seconds(24) }.count >= 30, "the backoff reached its cap in each outage")
    }

    /// The same seed, the same log, byte for byte; another seed, another log.
    @Test func theSameSeedGivesTheSameLog() async throws {
        let first = try await Self.flappingHour(seed: 11)
        let second = try await Self.flappingHour(seed: 11)
        let split = zip(first, second).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(first.count, second.count)
        #expect(
            first == second,
            "from line \(split): \(first.dropFirst(max(0, split - 3)).prefix(6)) and \(second.dropFirst(max(0, split - 3)).prefix(6))")
        let other = try await Self.flappingHour(seed: 12)
        #expect(first != other)
    }

    /// Pings every 30 s answered for two hours; then the server stops answering, and the client
    /// gives the connection up after its missed pongs, 30 s apart, and says so once.
    @Test func pingFailsAfterMissedPongsAtThirtySecondIntervals() async throws {
        try await withSimulatedNetwork(seed: 3, link: Self.link) { network, clock in
            let server = network.server(host: "quiet.test")
            var configuration = WebSocketConfiguration(reconnection: .none, logger: Self.quiet)
            configuration.ping = PingConfig(pingInterval: .seconds(30), maxPingFailures: 3)
            let socket = network.webSocket(url: "ws://quiet.test/", configuration: configuration)
            socket.onPingFailed = { _ in network.record("ping failed") }
            try await socket.connect()
            try await clock.sleep(for: .seconds(7200))
            #expect(socket.state == .connected(protocol: nil))
            #expect(network.eventLines.filter { $0.hasSuffix(" pong") }.count >= 239)
            // Measured on the network's clock: 20 ms ± 5 each way.
            let roundTrip = try #require(socket.pingRoundTripTime)
            #expect(roundTrip >= .milliseconds(40) && roundTrip <= .milliseconds(50), "\(roundTrip)")
            server.answersPings = false
            let stopped = clock.now
            try await clock.sleep(for: .seconds(600))
            let log = network.eventLines
            guard case .disconnected(.pingFailed(let missed)) = socket.state else {
                Issue.record("still \(socket.state)")
                return
            }
            #expect(missed == 3)
            let failures = log.filter { $0.hasSuffix(" ping failed") }
            #expect(failures.count == 1, "onPingFailed ran once: \(failures)")
            // The unanswered pings: the last three, 30 s apart, no pong after the first of them,
            // and the failure when the last one's pong timeout ran out.
            let failedAt = try #require(failures.first.flatMap { Self.seconds($0.split(separator: " ")[0]) })
            let pings = Self.times(of: " ping", in: log)
            let unanswered = Array(pings.suffix(3))
            #expect(unanswered.count == 3 && unanswered[0] >= Self.seconds(stopped.offset) - 30)
            let lastPong = Self.times(of: " pong", in: log).last ?? 0
            #expect(lastPong < unanswered[0], "a pong after \(unanswered[0])")
            for (earlier, later) in zip(unanswered, unanswered.dropFirst()) {
                #expect(abs(later - earlier - 30) < 0.001)
            }
            #expect(abs(failedAt - unanswered[2] - 30) < 0.001, "failed at \(failedAt), pings at \(unanswered)")
            #expect(pings.allSatisfy { $0 <= failedAt }, "no ping after the failure")
        }
    }

    /// `terminate()` during a backoff wait: the wait is cancelled, no attempt follows in the next
    /// hour, even once the server is back, and no timer of the client is left on the clock.
    @Test func terminateDuringABackoffWaitEndsEverything() async throws {
        try await withSimulatedNetwork(seed: 5, link: Self.link) { network, clock in
            let server = network.server(host: "gone.test")
            let configuration = WebSocketConfiguration(reconnection: .fixedDelay(.seconds(20)), logger: Self.quiet)
            let socket = network.webSocket(url: "ws://gone.test/", configuration: configuration)
            try await socket.connect()
            server.stop()
            try await clock.sleep(for: .seconds(5))
            #expect(clock.scheduledCount == 1, "the client's retry timer waits")
            network.record("terminating")
            await socket.terminate()
            #expect(clock.scheduledCount == 0, "terminate cancelled the retry timer")
            server.start()
            try await clock.sleep(for: .seconds(3600))
            let log = network.eventLines
            let terminated = try #require(log.firstIndex { $0.hasSuffix(" terminating") })
            #expect(!log[terminated...].contains { $0.contains(" connect ") }, "\(log[terminated...])")
            #expect(log.filter { $0.contains(" connect ") }.count == 1)
            #expect(socket.state == .disconnected(.terminated))
        }
    }

    /// A thousand clients on one server that restarts: every one reconnects once it is back,
    /// their attempts spread by the jitter, all within the strategy's cap.
    @Test func aThousandClientsReconnectAfterARestart() async throws {
        let started = ContinuousClock.now
        try await withSimulatedNetwork(seed: 9, link: Self.link) { network, clock in
            let server = network.server(host: "storm.test")
            let configuration = WebSocketConfiguration(
                reconnection: .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30), jitter: 0.2), logger: Self.quiet)
            let sockets = (0..<1_000).map { _ in network.webSocket(url: "ws://storm.test/", configuration: configuration) }
            for socket in sockets { try await socket.connect() }
            #expect(server.connectionCount == 1_000)
            server.restart(downFor: .seconds(120))
            try await clock.sleep(for: .seconds(240))
            #expect(server.connectionCount == 1_000)
            #expect(sockets.allSatisfy { $0.state == .connected(protocol: nil) })
            #expect(server.acceptedCount == 2_000)
            let waits = Self.retryWaits(network.eventLines)
            #expect(waits.allSatisfy { $0 <= .seconds(36) })
        }
        print("1,000 clients through a restart: \(ContinuousClock.now - started) of wall time")
    }

    /// Messages cross the link with its delay and bandwidth; a partition holds them (the
    /// connection stays open, nothing is lost) until it heals, and they arrive in order.
    @Test func messagesWaitOutAPartitionInOrder() async throws {
        let profile = FaultProxy.LinkProfile(
            name: "slow", downlink: .init(kilobitsPerSecond: 80, delay: .milliseconds(100)),
            uplink: .init(kilobitsPerSecond: 80, delay: .milliseconds(100)))
        try await withSimulatedNetwork(seed: 1, link: profile) { network, clock in
            _ = network.server(host: "echo.test")
            let socket = network.webSocket(url: "ws://echo.test/", configuration: .init(reconnection: .none, logger: Self.quiet))
            let messages = socket.messages
            try await socket.connect()
            let sent = clock.now
            try await socket.send(String(repeating: "x", count: 1_000))
            var iterator = messages.makeAsyncIterator()
            let echo = await iterator.next()
            // 1,000 bytes at 10,000 bytes a second, and 100 ms, each way.
            #expect(echo?.text?.count == 1_000)
            #expect(sent.duration(to: clock.now) == .milliseconds(400))
            network.partition()
            for n in 1...3 { try await socket.send("\(n)") }
            try await clock.sleep(for: .seconds(600))
            #expect(socket.state == .connected(protocol: nil))
            #expect(!network.eventLines.contains { $0.contains("← text 1 bytes") })
            network.heal()
            var echoed: [String] = []
            for _ in 1...3 { echoed.append(await iterator.next()?.text ?? "") }
            #expect(echoed == ["1", "2", "3"])
        }
    }

    /// A path switch leaves the connection open but dead: the client learns it from its missed
    /// pongs, reconnects over the new path, and its messages flow again.
    @Test func aPathSwitchIsFoundByThePings() async throws {
        try await withSimulatedNetwork(seed: 4, link: Self.link) { network, clock in
            let server = network.server(host: "moving.test")
            var configuration = WebSocketConfiguration(reconnection: .fixedDelay(.seconds(1)), logger: Self.quiet)
            configuration.ping = PingConfig(pingInterval: .seconds(10), maxPingFailures: 2)
            let socket = network.webSocket(url: "ws://moving.test/", configuration: configuration)
            let messages = socket.messages
            try await socket.connect()
            try await clock.sleep(for: .seconds(30))
            network.switchPath()
            let switched = clock.now
            try await clock.sleep(for: .seconds(60))
            #expect(socket.state == .connected(protocol: nil))
            #expect(server.acceptedCount == 2)
            let log = network.eventLines
            let failedAt = try #require(Self.times(of: " aborted by client", in: log).first)
            // Two missed pongs 10 s apart: found within 30 s, not before 10.
            #expect(failedAt - Self.seconds(switched.offset) > 10 && failedAt - Self.seconds(switched.offset) <= 30, "\(failedAt)")
            try await socket.send("after")
            var iterator = messages.makeAsyncIterator()
            #expect(await iterator.next()?.text == "after")
        }
    }

    /// `DUPLEX_SIMULATION_SEED` is read by `withSimulatedNetwork`; a seed given in the code is the
    /// network's when it is not set.
    @Test func theEnvironmentsSeedComesFirstAndMustBeANumber() throws {
        #expect(try simulationSeed(given: 5, environment: [:]) == 5)
        #expect(try simulationSeed(given: 5, environment: ["DUPLEX_SIMULATION_SEED": "18446744073709551615"]) == .max)
        for bad in ["", "-1", "0x10", "12 ", "18446744073709551616", "seven"] {
            #expect(throws: InvalidSimulationSeed.self) { try simulationSeed(given: 5, environment: ["DUPLEX_SIMULATION_SEED": bad]) }
        }
    }

    /// Once the simulation is over, nothing holds its network (nor its clock and the clock's
    /// thread): a suite of many simulated tests does not keep a thread for each.
    @Test func theNetworkGoesAwayAfterwards() async throws {
        let gone = NIOLockedValueBox<WeakNetwork>(WeakNetwork())
        let server = try await withSimulatedNetwork(seed: 2, link: Self.link) { network, _ in
            gone.withLockedValue { $0.value = network }
            let server = network.server(host: "echo.test")
            let socket = network.webSocket(url: "ws://echo.test/", configuration: .init(reconnection: .none, logger: Self.quiet))
            try await socket.connect()
            return server
        }
        server.stop()  // kept by the test, it outlives its network, harmlessly
        // The clock's executor may still be running the terminated client's last jobs.
        try await withTimeout(.seconds(5)) {
            while gone.withLockedValue({ $0.value }) != nil { await Task.yield() }
        }
        #expect(gone.withLockedValue { $0.value } == nil)
    }

    struct WeakNetwork {
        weak var value: SimulatedNetwork?
    }

    @Test func theSeedIsTheNetworks() async throws {
        let seed = try await withSimulatedNetwork(seed: 99) { network, _ in network.seed }
        let fromEnvironment = ProcessInfo.processInfo.environment["DUPLEX_SIMULATION_SEED"].flatMap(UInt64.init)
        #expect(seed == fromEnvironment ?? 99)
    }

    /// A server down 1 of every 2 minutes for an hour, with a client reconnecting by exponential
    /// backoff from 1 s to 30 s (±20%), over a link of 20 ms each way with 5 ms of jitter.
    static func flappingHour(seed: UInt64) async throws -> [String] {
        try await withSimulatedNetwork(seed: seed, link: Self.link) { network, clock in
            let server = network.server(host: "flappy.test")
            var configuration = WebSocketConfiguration(logger: Self.quiet)
            configuration.reconnection = .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30), jitter: 0.2)
            let socket = network.webSocket(url: "ws://flappy.test/", configuration: configuration)
            try await socket.connect()
            for _ in 0..<30 {
                server.restart(downFor: .seconds(60))
                try await clock.sleep(for: .seconds(120))
            }
            #expect(clock.now.offset >= .seconds(3600))
            return network.eventLines
        }
    }

    static let link = FaultProxy.LinkProfile(
        name: "lan", downlink: .init(kilobitsPerSecond: nil, delay: .milliseconds(20), jitter: .milliseconds(5)),
        uplink: .init(kilobitsPerSecond: nil, delay: .milliseconds(20), jitter: .milliseconds(5)))

    /// The time from each refusal or drop to the same client's attempt after it.
    static func retryWaits(_ log: [String]) -> [Duration] {
        var waits: [Duration] = []
        var lost: [Substring: Double] = [:]
        for line in log {
            let parts = line.split(separator: " ")
            guard parts.count >= 3, let time = seconds(parts[0]) else { continue }
            let client = parts[1].prefix { $0 != "#" }
            if parts[2] == "refused" || parts[2] == "dropped" || line.hasSuffix("closed with no close frame") {
                lost[client] = time
            } else if parts[2] == "connect" || parts[2] == "GET", let since = lost.removeValue(forKey: client) {
                waits.append(.seconds(time - since))
            }
        }
        return waits
    }

    /// The times of the lines that end with `suffix`.
    static func times(of suffix: String, in log: [String]) -> [Double] {
        var times: [Double] = []
        for line in log where line.hasSuffix(suffix) {
            if let time = seconds(line.split(separator: " ")[0]) { times.append(time) }
        }
        return times
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) * 1e-18
    }

    static func seconds(_ text: Substring) -> Double? {
        Double(text.dropLast())
    }

    static let quiet: Logger = {
        var logger = Logger(label: "duplex.simulated")
        logger.logLevel = .error
        return logger
    }()
}
