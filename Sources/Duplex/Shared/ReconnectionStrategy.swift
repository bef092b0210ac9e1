/// When and how often a ``WebSocket`` reconnects after it lost its connection.
///
/// Delays are bounded: none is longer than one day, whatever the arguments, and the
/// arithmetic never overflows.
///
/// A socket reconnects after an abnormal closure (no close frame, or a close code other than
/// 1000 from the peer), a ping failure or an error; never after ``WebSocket/disconnect(code:reason:)``,
/// ``WebSocket/stop()`` or ``WebSocket/terminate()``. Attempts are numbered from 0; a connection
/// that opens resets the count.
///
/// ```swift
/// .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30), maxAttempts: 10)  // 1s, 2s, 4s … ± jitter
/// .fixedDelay(.seconds(5))
/// .linearBackoff(step: .seconds(1), maxDelay: .seconds(10))                             // 1s, 2s, 3s …
/// .none
/// ReconnectionStrategy(maxAttempts: 5) { attempt in attempt == 0 ? .milliseconds(100) : .seconds(2) }
/// ```
public struct ReconnectionStrategy: Sendable {
    /// The most attempts after a loss, or nil for no limit.
    public var maxAttempts: Int?
    private let delay: @Sendable (Int) -> Duration?

    /// A custom strategy: `delayForAttempt` returns the wait before attempt `n` (from 0), or nil
    /// to stop trying.
    public init(maxAttempts: Int? = nil, delayForAttempt: @escaping @Sendable (_ attempt: Int) -> Duration?) {
        self.maxAttempts = maxAttempts
        self.delay = delayForAttempt
    }

    /// The wait before attempt `attempt` (from 0), or nil when the strategy gives up.
    public func delay(forAttempt attempt: Int) -> Duration? {
        if let maxAttempts, attempt >= maxAttempts { return nil }
        return delay(attempt)
    }

    /// Never reconnect.
    public static let none = ReconnectionStrategy(maxAttempts: 0) { _ in nil }

    /// Doubles the delay after each attempt, from `baseDelay` up to `maxDelay`, each delay
    /// varied by up to ±`jitter` (a fraction, default 0.2) so that many clients do not reconnect
    /// in step.
    public static func exponentialBackoff(
        baseDelay: Duration = .seconds(1),
        maxDelay: Duration = .seconds(30),
        maxAttempts: Int? = nil,
        jitter: Double = 0.2
    ) -> ReconnectionStrategy {
        let base = DelayArithmetic.seconds(baseDelay)
        let limit = DelayArithmetic.seconds(maxDelay)
        return ReconnectionStrategy(maxAttempts: maxAttempts) { attempt in
            DelayArithmetic.backoff(base: base, multiplier: 2, attempt: attempt, limit: limit, jitter: jitter)
        }
    }

    /// The same delay before every attempt.
    public static func fixedDelay(_ delay: Duration, maxAttempts: Int? = nil) -> ReconnectionStrategy {
        ReconnectionStrategy(maxAttempts: maxAttempts) { _ in delay }
    }

    /// `step`, then 2 × `step`, 3 × `step` … up to `maxDelay`.
    public static func linearBackoff(
        step: Duration = .seconds(1),
        maxDelay: Duration = .seconds(30),
        maxAttempts: Int? = nil
    ) -> ReconnectionStrategy {
        let step = DelayArithmetic.seconds(step)
        let limit = DelayArithmetic.seconds(maxDelay)
        return ReconnectionStrategy(maxAttempts: maxAttempts) { attempt in
            DelayArithmetic.duration(seconds: step * Double(max(attempt, 0) + 1), limit: limit)
        }
    }
}
