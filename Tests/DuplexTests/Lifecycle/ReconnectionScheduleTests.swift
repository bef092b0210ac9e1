@testable import Duplex
import Testing

@Suite("one retry model: ReconnectionStrategy, RetryPolicy and the schedule both clients run")
struct ReconnectionScheduleTests {
    @Test("the seconds spellings give the same delays as the Duration ones")
    func secondsAndDurations() {
        let pairs: [(ReconnectionStrategy, ReconnectionStrategy)] = [
            (.fixedDelay(5.0), .fixedDelay(.seconds(5))),
            (.linearBackoff(step: 0.5, maxDelay: 2), .linearBackoff(step: .milliseconds(500), maxDelay: .seconds(2))),
            (
                .exponentialBackoff(baseDelay: 0.25, maxDelay: 4, jitter: 0),
                .exponentialBackoff(baseDelay: .milliseconds(250), maxDelay: .seconds(4), jitter: 0)
            ),
            (
                RetryPolicy(initialDelay: 1.0, maxDelay: 60.0, backoffMultiplier: 3, jitter: 0),
                RetryPolicy(initialDelay: .seconds(1), maxDelay: .seconds(60), backoffMultiplier: 3, jitter: 0)
            ),
        ]
        for (seconds, durations) in pairs {
            for attempt in 0..<8 {
                #expect(seconds.delay(forAttempt: attempt) == durations.delay(forAttempt: attempt))
            }
        }
        #expect(
            (0..<5).map { ReconnectionStrategy.linearBackoff(step: 0.5, maxDelay: 2).delay(forAttempt: $0) } == [
                .milliseconds(500), .seconds(1), .milliseconds(1500), .seconds(2), .seconds(2),
            ])
        #expect(
            (0..<6).map { RetryPolicy(initialDelay: 1.0, maxDelay: 60.0, backoffMultiplier: 3, jitter: 0).delay(forAttempt: $0) } == [
                .seconds(1), .seconds(3), .seconds(9), .seconds(27), .seconds(60), .seconds(60),
            ])
    }

    @Test("a custom strategy in seconds or Durations; maxAttempts and disabled stop it")
    func customAndLimits() {
        let seconds = ReconnectionStrategy(maxAttempts: 3) { attempt in Double(attempt) * 0.5 }
        let durations = ReconnectionStrategy(maxAttempts: 3) { attempt in .milliseconds(attempt * 500) }
        #expect((0..<4).map { seconds.delay(forAttempt: $0) } == [.zero, .milliseconds(500), .seconds(1), nil])
        #expect((0..<4).map { durations.delay(forAttempt: $0) } == [.zero, .milliseconds(500), .seconds(1), nil])
        #expect(ReconnectionStrategy.none.delay(forAttempt: 0) == nil)
        #expect(RetryPolicy.disabled.delay(forAttempt: 0) == nil)
        #expect(RetryPolicy(enabled: false).delay(forAttempt: 0) == nil)
        #expect(ReconnectionStrategy(maxAttempts: 2) { _ in -5.0 }.delay(forAttempt: 0) == .zero, "a negative delay is clamped")
    }

    @Test("the schedule counts attempts in a row, starts over when a connection proves itself, and honours a server's wish")
    func schedule() throws {
        var schedule = ReconnectionSchedule(strategy: RetryPolicy(maxAttempts: 3, initialDelay: 1.0, maxDelay: 10.0, jitter: 0))
        #expect(schedule.nextAttempt()! == (0, .seconds(1)))
        #expect(schedule.nextAttempt()! == (1, .seconds(2)))
        schedule.connectionProved()
        #expect(schedule.nextAttempt()! == (0, .seconds(1)))
        // The server's retry: replaces the initial delay, within minimumDelay...maxDelay.
        #expect(schedule.nextAttempt(suggested: .milliseconds(300))! == (1, .milliseconds(600)))
        #expect(schedule.nextAttempt(suggested: .seconds(1000))! == (2, .seconds(10)))
        #expect(schedule.nextAttempt() == nil, "maxAttempts: 3 in a row")
        #expect(schedule.attempts == 3)
        var imposed = ReconnectionSchedule(strategy: RetryPolicy(initialDelay: 1.0, maxDelay: 10.0, jitter: 0))
        #expect(imposed.nextAttempt(overriding: .seconds(4))! == (0, .seconds(4)), "Retry-After")
        #expect(imposed.nextAttempt(overriding: .seconds(400))! == (1, .seconds(10)), "Retry-After is capped too")
        #expect(imposed.nextAttempt(overriding: .zero)! == (2, .milliseconds(100)), "and floored at minimumDelay")
    }
}
