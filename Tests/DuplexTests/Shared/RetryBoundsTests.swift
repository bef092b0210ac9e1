@testable import Duplex
import DuplexSchema
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import Testing
import TestSupport

/// Every number a server sends (`retry:`, `Retry-After`) and every configuration value ends in a
/// bounded delay, never in a trap (issue 16: `retry: 9999999999999` used to crash the process).
@Suite("Retry bounds")
struct RetryBoundsTests {
    /// Values a hostile server might send as `retry:`.
    static let hostileRetries = [
        "0", "1", "99", "100", "2000", "99999999999", "9999999999999", "9223372036854775807",
        "9223372036854775808", String(repeating: "9", count: 400), "00000000000000000000001",
    ]

    @Test("the server's retry:, however large or small, is clamped to minimumDelay...maxDelay")
    func hostileRetryFieldsAreClamped() throws {
        let policy = RetryPolicy(initialDelay: 1, maxDelay: 30, jitter: 0.1)
        for text in Self.hostileRetries {
            var parser = ServerSentEventParser()
            _ = try parser.parse(Array("retry: \(text)\ndata: x\n\n".utf8))
            for attempt in [0, 1, 10, 63, 64, 1000, Int.max] {
                let delay = try #require(policy.delay(forAttempt: attempt, suggested: parser.reconnectionTime.map { Duration.milliseconds($0) }))
                #expect(delay >= .milliseconds(90), "retry: \(text), attempt \(attempt): \(delay)")
                #expect(delay <= .seconds(33), "retry: \(text), attempt \(attempt): \(delay)")
            }
        }
    }

    @Test("extreme policies and strategies give bounded delays and never trap")
    func extremeConfigurations() throws {
        let policies = [
            RetryPolicy(initialDelay: .infinity, maxDelay: .infinity, backoffMultiplier: .infinity, jitter: .infinity),
            RetryPolicy(initialDelay: .nan, maxDelay: .nan, backoffMultiplier: .nan, jitter: .nan, minimumDelay: .nan),
            RetryPolicy(initialDelay: -5, maxDelay: -5, backoffMultiplier: -5, jitter: -5, minimumDelay: -5),
            RetryPolicy(initialDelay: 1e300, maxDelay: 1e300, backoffMultiplier: 1e300),
        ]
        for policy in policies {
            for attempt in [0, 1, 64, 10_000, Int.max] {
                let delay = try #require(policy.delay(forAttempt: attempt, suggested: .milliseconds(Int.max)))
                #expect(delay >= .zero && delay <= .seconds(2 * 86_400), "\(policy), attempt \(attempt): \(delay)")
            }
        }
        let strategies: [ReconnectionStrategy] = [
            .exponentialBackoff(baseDelay: .seconds(100), maxDelay: .seconds(Int64.max), jitter: 1),
            .exponentialBackoff(baseDelay: .seconds(Int64.max), maxDelay: .seconds(Int64.max), jitter: .nan),
            .linearBackoff(step: .seconds(Int64.max), maxDelay: .seconds(Int64.max)),
        ]
        for strategy in strategies {
            for attempt in [0, 1, 62, 63, 64, 200, Int.max - 1] {
                let delay = try #require(strategy.delay(forAttempt: attempt))
                #expect(delay >= .zero && delay <= .seconds(2 * 86_400), "attempt \(attempt): \(delay)")
            }
        }
    }

    @Test("fuzz: 20,000 random streams through the parser and the retry path end in events or a clear error")
    func fuzzParserAndRetryPath() async throws {
        // Seconds of computation: on a thread of its own, not the cooperative pool's. The thread
        // has no test to record issues in, so it returns what it found and the test checks it.
        let run = try await onThread { try Self.fuzzParserAndRetryPathBlocking() }
        #expect(run.inputs == 20_000)
        #expect(run.events > 0, "the fuzzer should produce some events")
        #expect(run.tooLarge > 0, "the fuzzer should hit the size limit sometimes")
        #expect(run.problems == [])
    }

    struct FuzzRun: Sendable {
        var inputs = 0
        var events = 0
        var tooLarge = 0
        var problems: [String] = []
    }

    private static func fuzzParserAndRetryPathBlocking() throws -> FuzzRun {
        var run = FuzzRun()
        var rng = SplitMix64(seed: 0xD0_0D1E)
        let pieces: [[UInt8]] = [
            Array("retry:".utf8), Array("retry: ".utf8), Array("data:".utf8), Array("id:".utf8), Array("event:".utf8),
            Array(":".utf8), [0x0A], [0x0D], [0x0D, 0x0A], [0x00], [0xEF, 0xBB, 0xBF], [0xFF], [0xC3],
            Array("9999999999999".utf8), Array("0".utf8), Array("18446744073709551616".utf8), Array(" ".utf8),
        ]
        let policy = RetryPolicy(initialDelay: 1, maxDelay: 60)
        for _ in 0..<20_000 {
            var stream: [UInt8] = []
            for _ in 0..<Int.random(in: 1...40, using: &rng) {
                if Bool.random(using: &rng) {
                    stream += pieces[Int.random(in: 0..<pieces.count, using: &rng)]
                } else {
                    stream += (0..<Int.random(in: 1...12, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
                }
            }
            var parser = ServerSentEventParser(configuration: .init(maxEventBytes: 256))
            var offset = 0
            do {
                while offset < stream.count {
                    let end = min(stream.count, offset + Int.random(in: 1...64, using: &rng))
                    run.events += try parser.parse(stream[offset..<end]).count
                    offset = end
                }
            } catch {
                if error.code == .eventTooLarge { run.tooLarge += 1 } else { run.problems.append("\(stream): \(error)") }
            }
            parser.finish()
            for attempt in [0, 5, 100] {
                let delay = policy.delay(forAttempt: attempt, suggested: parser.reconnectionTime.map { Duration.milliseconds($0) })
                if let delay, delay >= .milliseconds(90) && delay <= .seconds(66) { continue }
                run.problems.append("\(stream), attempt \(attempt): delay \(String(describing: delay))")
            }
            run.inputs += 1
        }
        return run
    }

    @Test("Retry-After of any size is clamped by the policy")
    func hostileRetryAfter() {
        let policy = RetryPolicy(maxDelay: 30)
        for text in ["0", "5", "99999999999999999999999999", "Wed, 21 Oct 2999 07:28:00 GMT", "Wed, 21 Oct 1999 07:28:00 GMT"] {
            let parsed = DelayArithmetic.retryAfter(text)
            let bounded = policy.bounded(retryAfter: parsed ?? .zero)
            #expect(bounded >= .milliseconds(100) && bounded <= .seconds(30), "\(text): \(bounded)")
        }
    }

    @Test("end to end: a server sending retry: 9999999999999, then retry: 0, gets reconnections at maxDelay, then at the floor")
    func hostileServerEndToEnd() async throws {
        let peer = try await ScriptedHTTPPeer.start { n in
            .init(chunks: ["retry: \(n == 1 ? "9999999999999" : "0")\nid: \(n)\ndata: x\n\n"])
        }
        let clock = RecordingClock()
        let sse = ServerSentEventManager(
            request: SSERequest(url: URL(string: "http://127.0.0.1:\(peer.port)/")!),
            retryPolicy: RetryPolicy(initialDelay: 1, maxDelay: 0.5, jitter: 0, minimumDelay: 0.05),
            configuration: SSEConfiguration(),
            clock: clock
        )
        try await withTimeout(.seconds(10)) {
            try await sse.connect()
            await peer.waitForRequests(4)
        }
        await sse.terminate()
        let sleeps = clock.sleeps
        #expect(sleeps.count >= 3)
        #expect(sleeps.first.map { abs(DelayArithmetic.seconds($0) - 0.5) < 0.01 } == true, "retry: 9999999999999 waits maxDelay: \(sleeps)")
        for sleep in sleeps.dropFirst() {
            #expect(DelayArithmetic.seconds(sleep) >= 0.049, "retry: 0 waits the floor: \(sleeps)")
        }
    }
}

/// A clock whose time stands still, and whose sleeps return at once and are recorded: each as
/// long as its deadline is from the still now.
final class RecordingClock: Clock, Sendable {
    typealias Instant = ContinuousClock.Instant
    private let recorded = NIOLockedValueBox<[Duration]>([])
    private let start = ContinuousClock.now

    var now: Instant { start }
    var minimumResolution: Duration { .nanoseconds(1) }
    var sleeps: [Duration] { recorded.withLockedValue { $0 } }

    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        recorded.withLockedValue { $0.append(deadline - start) }
        try Task.checkCancellation()
        await Task.yield()
    }
}

/// A small seeded generator, so a fuzz failure can be replayed.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
