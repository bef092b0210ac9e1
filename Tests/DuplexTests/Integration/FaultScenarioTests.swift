import Duplex
import DuplexServer
import DuplexTesting
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOConcurrencyHelpers
import TestSupport
import Testing

/// Scenario files: a timeline of faults for the proxy and the server behind it (issue 33).
@Suite("FaultScenario")
struct FaultScenarioTests {
    /// A clock whose sleeps end at once, at their deadline: a scenario's steps run back to back,
    /// in order, each at its own time as the clock tells it.
    final class InstantClock: Clock, Sendable {
        struct Instant: InstantProtocol {
            var offset: Duration
            func advanced(by duration: Duration) -> Self { .init(offset: offset + duration) }
            func duration(to other: Self) -> Duration { other.offset - offset }
            static func < (lhs: Self, rhs: Self) -> Bool { lhs.offset < rhs.offset }
        }

        private let current = NIOLockedValueBox(Instant(offset: .zero))
        var now: Instant { current.withLockedValue { $0 } }
        var minimumResolution: Duration { .nanoseconds(1) }

        func sleep(until deadline: Instant, tolerance: Duration?) async throws {
            try Task.checkCancellation()
            current.withLockedValue { $0 = max($0, deadline) }
        }
    }

    /// The lines a run logs.
    final class Lines: Sendable {
        private let lines = NIOLockedValueBox<[String]>([])
        var all: [String] { lines.withLockedValue { $0 } }
        @Sendable func log(_ line: String) { lines.withLockedValue { $0.append(line) } }
    }

    static let example = """
        {
          "seed": 42,
          "steps": [
            {"at": 0, "add": {"type": "latency", "ms": 300, "jitter": 50, "direction": "downstream"}, "for": 5, "name": "lag"},
            {"at": 1.5, "add": {"type": "blackhole", "toxicity": 0.5}},
            {"at": 2, "chaos": "/_chaos/drop?route=echo"},
            {"at": 3, "remove": "lag"},
            {"at": 5, "heal": true},
            {"at": 5, "drop": true}
          ]
        }
        """

    @Test("a scenario file is read into its steps: times, toxics, directions, names, durations and the seed")
    func reads() throws {
        let scenario = try FaultScenario(json: Data(Self.example.utf8))
        #expect(scenario.seed == 42)
        #expect(
            scenario.steps == [
                .init(
                    at: .zero,
                    .add(.latency(.milliseconds(300), jitter: .milliseconds(50)), direction: .downstream, name: "lag", duration: .seconds(5))),
                .init(at: .milliseconds(1500), .add(FaultProxy.Toxic.blackhole.toxicity(0.5), direction: .both)),
                .init(at: .seconds(2), .chaos("drop?route=echo")),
                .init(at: .seconds(3), .remove(name: "lag")),
                .init(at: .seconds(5), .heal),
                .init(at: .seconds(5), .drop),
            ])
    }

    @Test("a wrong scenario is refused with the step and the field that are wrong")
    func refusesWithReasons() {
        let cases: [(String, String)] = [
            ("not json", "not JSON"),
            (#"[1]"#, "a scenario is a JSON object"),
            (#"{"steps": [], "seeds": 1}"#, #"unknown field "seeds""#),
            (#"{"steps": []}"#, "steps must be a list of at least one step"),
            (#"{"seed": "x", "steps": [{"at": 0, "heal": true}]}"#, "seed must be a whole number"),
            (#"{"steps": [{"heal": true}]}"#, "step 1: at must be a number of seconds"),
            (#"{"steps": [{"at": -1, "heal": true}]}"#, "step 1: at must be a number of seconds from 0"),
            (#"{"steps": [{"at": 0, "heal": true}, {"at": 1}]}"#, "step 2: a step does one thing: add, remove, heal, drop or chaos (found none)"),
            (
                #"{"steps": [{"at": 0, "heal": true, "drop": true}]}"#,
                "step 1: a step does one thing: add, remove, heal, drop or chaos (found heal, drop)"
            ),
            (#"{"steps": [{"at": 0, "heal": false}]}"#, "step 1: heal takes true"),
            (#"{"steps": [{"at": 0, "heal": true, "for": 2}]}"#, "step 1: for goes with add only"),
            (#"{"steps": [{"at": 0, "hael": true}]}"#, #"step 1: unknown field "hael""#),
            (
                #"{"steps": [{"at": 0, "add": {"type": "lag"}}]}"#,
                #"step 1: type must be latency, bandwidth, blackhole, reset-peer, close-after, slicer, path-switch, suspend or profile, not "lag""#
            ),
            (#"{"steps": [{"at": 0, "add": {"type": "latency"}}]}"#, "step 1: latency needs ms=N"),
            (
                #"{"steps": [{"at": 0, "add": {"type": "blackhole", "direction": "sideways"}}]}"#,
                "step 1: direction must be both, upstream or downstream"
            ),
            (#"{"steps": [{"at": 0, "add": {"type": "blackhole", "toxicity": 2}}]}"#, "step 1: toxicity must be a number from 0 to 1"),
            (#"{"steps": [{"at": 0, "add": {"type": "blackhole"}, "for": 0}]}"#, "step 1: for must be a number of seconds, more than 0"),
            (#"{"steps": [{"at": 1, "remove": "lag"}]}"#, #"step 1: remove "lag", but no step before it adds a toxic of that name"#),
            (#"{"steps": [{"at": 0, "chaos": "/_chaos/"}]}"#, "step 1: chaos takes the fault's path"),
            // Values that would overflow a time: refused, not trapped on.
            (#"{"steps": [{"at": 1e12, "heal": true}]}"#, "step 1: at must be a number of seconds from 0 to 31536000 (a year)"),
            (
                #"{"steps": [{"at": 0, "add": {"type": "blackhole"}, "for": 1e300}]}"#,
                "step 1: for must be a number of seconds, more than 0 and at most 31536000"
            ),
            (#"{"steps": [{"at": 0, "add": {"type": "latency", "ms": 1e18}}]}"#, "step 1: ms must be an integer from 0 to 86400000"),
            (#"{"steps": [{"at": 0, "add": {"type": "latency", "ms": 1e30}}]}"#, "step 1: ms must be an integer from 0 to 86400000"),
            (#"{"steps": [{"at": 0, "add": {"type": "slicer", "size": 99999999999}}]}"#, "step 1: size must be an integer from 1 to 2147483647"),
        ]
        for (json, reason) in cases {
            #expect(throws: FaultScenario.Invalid.self, "\(json)") { try FaultScenario(json: Data(json.utf8)) }
            do {
                _ = try FaultScenario(json: Data(json.utf8))
            } catch {
                #expect("\(error)".contains(reason), "\(json): \(error)")
            }
        }
    }

    @Test("run: each step takes effect at its time, in order, with a line each; a chaos step reaches the server; the same seed logs the same lines")
    func runs() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(configuration: .init(chaos: true)) { server in
                let scenario = try FaultScenario(json: Data(Self.example.utf8))
                func run() async throws -> [String] {
                    let proxy = try await FaultProxy.start(upstreamPort: server.port, seed: scenario.seed)
                    let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(proxy.port)/echo")!)
                    let messages = socket.messages
                    try await socket.connect()
                    // An echo first: the server has registered the connection, so the drop reaches it.
                    try await socket.send("warm")
                    _ = try await messages.first(within: .seconds(10))
                    let lines = Lines()
                    try await scenario.run(on: proxy, clock: InstantClock(), log: lines.log)
                    await socket.terminate()
                    await proxy.stop()
                    return lines.all
                }
                let first = try await run()
                #expect(
                    first == [
                        "scenario: 6 steps over 5 s, proxy seed 42",
                        #"scenario 0 s: step 1: add latency 300 ms ± 50 ms (downstream) as "lag", for 5 s"#,
                        "scenario 1.5 s: step 2: add blackhole (toxicity 0.5) (both)",
                        "scenario 2 s: step 3: chaos drop?route=echo",
                        #"scenario 3 s: step 4: remove "lag""#,
                        "scenario 5 s: step 5: heal (every toxic removed)",
                        "scenario 5 s: step 6: drop every connection",
                        "scenario: done after 5 s",
                    ])
                #expect(try await run() == first, "the same scenario and seed, the same lines")
                let metrics = try await HTTPProbe.get(port: server.port, "/metrics")
                #expect(metrics.contains(#"duplex_faults_injected_total{fault="drop"} 2"#), "each run's chaos step reached the server: \(metrics)")
            }
        }
    }

    @Test("a scenario built in code with a time past a year is refused")
    func refusesLongTimesInCode() {
        #expect(throws: FaultScenario.Invalid.self) { try FaultScenario(steps: [.init(at: .seconds(40_000_000), .heal)]) }
        #expect(throws: FaultScenario.Invalid.self) {
            try FaultScenario(steps: [.init(at: .zero, .add(.blackhole, direction: .both, duration: .seconds(Int64.max)))])
        }
    }

    @Test("a toxic's for: it is removed when its time is up, before the steps at that time")
    func expires() async throws {
        try await withTimeout(.seconds(30)) {
            let proxy = try await FaultProxy.start(upstreamPort: 9, seed: 1)
            let scenario = try FaultScenario(steps: [
                .init(at: .seconds(1), .add(.blackhole, direction: .upstream, duration: .milliseconds(500))),
                .init(at: .milliseconds(1500), .add(.latency(.milliseconds(10)), direction: .both, name: "slow")),
                .init(at: .seconds(2), .remove(name: "slow")),
                .init(at: .seconds(3), .remove(name: "slow")),
            ])
            let lines = Lines()
            try await scenario.run(on: proxy, clock: InstantClock(), log: lines.log)
            await proxy.stop()
            #expect(
                lines.all == [
                    "scenario: 4 steps over 3 s, proxy seed 1",
                    "scenario 1 s: step 1: add blackhole (upstream), for 500 ms",
                    "scenario 1.5 s: step 1's blackhole (upstream) removed, its 500 ms up",
                    #"scenario 1.5 s: step 2: add latency 10 ms (both) as "slow""#,
                    #"scenario 2 s: step 3: remove "slow""#,
                    #"scenario 3 s: step 4: remove "slow": already gone"#,
                    "scenario: done after 3 s",
                ])
        }
    }

    @Test("withScenario: the body runs through the proxy while the scenario plays; a chaos step the server refuses fails it with the reason")
    func withScenarioInTests() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                // The body ends first: its result comes back, and the rest is not played.
                let heal = try FaultScenario(steps: [.init(at: .seconds(3600), .heal)])
                let echoed = try await withScenario(heal, upstreamPort: server.port, seed: 5) { proxy in
                    #expect(proxy.seed == 5)
                    let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(proxy.port)/echo")!)
                    let messages = socket.messages
                    try await socket.connect()
                    try await socket.send("through")
                    let echo = try await messages.first(within: .seconds(10))
                    await socket.terminate()
                    return echo.text
                }
                #expect(echoed == "through")
                // This server has no /_chaos/ routes.
                let chaos = try FaultScenario(steps: [.init(at: .zero, .chaos("drop"))])
                await #expect {
                    try await withScenario(chaos, upstreamPort: server.port, clock: InstantClock()) { _ in
                        // Waits for nothing but the cancellation the failing step brings.
                        let (never, keep) = AsyncStream<Void>.makeStream()
                        for await _ in never {}
                        keep.finish()
                        try Task.checkCancellation()
                    }
                } throws: { error in
                    let text = "\(error)"
                    return error is FaultScenario.StepFailed
                        && text.contains("step 1 failed: chaos drop: the server answered 404 (is it running with --chaos?)")
                }
            }
        }
    }
}
