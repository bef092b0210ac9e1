import Duplex
import DuplexTesting
import Foundation
import Logging
import Testing

/// The card's time-based behaviours on a simulated network: hours of virtual time, in well under
/// a second of wall time, the same seed giving the same event log.
@Suite struct SimulatedTimeTests {
    /// An hour of a server that goes down for a minute every two: the client reconnects after
    /// each outage, every wait within the strategy's cap and jitter.
    @Test func reconnectsAcrossAnHourOfAFlappingServer() async throws {
        let started = ContinuousClock.now
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
        #expect(ContinuousClock.now - started < .seconds(5))
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

    /// The time from each refusal or drop to the attempt after it.
    static func retryWaits(_ log: [String]) -> [Duration] {
        var waits: [Duration] = []
        var lost: Double?
        for line in log {
            let parts = line.split(separator: " ")
            guard parts.count >= 3, let time = seconds(parts[0]) else { continue }
            if parts[2] == "refused" || line.hasSuffix("closed with no close frame") {
                lost = time
            } else if parts[2] == "connect", let since = lost {
                waits.append(.seconds(time - since))
                lost = nil
            }
        }
        return waits
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
