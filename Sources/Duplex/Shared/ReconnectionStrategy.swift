/// When and how often a client reconnects: one retry model for ``WebSocket`` (as its
/// ``WebSocketConfiguration/reconnection``) and ``ServerSentEventManager`` (as its
/// ``RetryPolicy``, the same type under the name seed code knows).
///
/// Delays are `Duration`s, as everywhere else in Duplex: write them so. Every delay can also be
/// given in `Double` seconds, and the type is also named ``RetryPolicy``: both are the seeds'
/// spellings, kept so that seed code compiles as written. The wait before attempt `n` (from 0) is
/// `initialDelay × backoffMultiplier^n + backoffIncrement × n`, capped at `maxDelay`, and varied by
/// up to ±`jitter` (a fraction) so that many clients do not reconnect in step; or whatever a
/// custom strategy returns. A connection that proves itself (a WebSocket that opens, an event
/// stream that delivers an event) starts the count over.
///
/// Delays are bounded: none is longer than one day, whatever the arguments or the server says,
/// and the arithmetic never overflows. A server's own suggestion (SSE `retry:` and
/// `Retry-After`) replaces `initialDelay`, clamped to `minimumDelay...maxDelay`.
///
/// ```swift
/// .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30), maxAttempts: 10)  // 1s, 2s, 4s … ± jitter
/// .exponentialBackoff(baseDelay: 1.0, maxDelay: 30.0, maxAttempts: 10)                  // the same, in seconds
/// .fixedDelay(.seconds(5))                                                              // or .fixedDelay(5.0)
/// .linearBackoff(step: .seconds(1), maxDelay: .seconds(10))                             // 1s, 2s, 3s …
/// .none                                                                                 // never reconnect
/// ReconnectionStrategy(maxAttempts: 5) { attempt in attempt == 0 ? .milliseconds(100) : .seconds(2) }
/// RetryPolicy(enabled: true, maxAttempts: 5, initialDelay: 1.0, maxDelay: 60.0, backoffMultiplier: 2.0)
/// ```
///
/// A ``WebSocket`` reconnects after an abnormal closure (no close frame, or a close code other
/// than 1000 from the peer), a ping failure or an error; never after
/// ``WebSocket/disconnect(code:reason:)``, ``WebSocket/stop()`` or ``WebSocket/terminate()``.
/// A ``ServerSentEventManager`` reconnects after its stream ends or fails (see its documentation
/// for the answers that stop it for good).
public struct ReconnectionStrategy: Sendable {
    /// Whether to reconnect at all.
    public var enabled: Bool
    /// The most attempts in a row, or nil for no limit.
    public var maxAttempts: Int?
    /// The wait before the first attempt.
    public var initialDelay: Duration
    /// The longest wait; it also caps a server's suggestion. At most one day.
    public var maxDelay: Duration
    /// What each failed attempt in a row multiplies the delay by (1: no growth).
    public var backoffMultiplier: Double
    /// What each failed attempt in a row adds to the delay (linear backoff).
    public var backoffIncrement: Duration
    /// How much each delay may vary, as a fraction (0.1 = ±10%).
    public var jitter: Double
    /// The shortest wait a server can ask for (SSE `retry:` and `Retry-After`).
    public var minimumDelay: Duration
    private var custom: (@Sendable (Int) -> Duration?)?
    /// Where the jitter's factor is drawn from: the system's generator, unless a simulated
    /// network (DuplexTesting's `withSimulatedNetwork`) gives its seeded one, so that a seed gives
    /// the same delays.
    package var jitterSource: (@Sendable (ClosedRange<Double>) -> Double)?

    /// Creates a strategy from durations.
    public init(
        enabled: Bool = true,
        maxAttempts: Int? = nil,
        initialDelay: Duration,
        maxDelay: Duration = .seconds(60),
        backoffMultiplier: Double = 2,
        backoffIncrement: Duration = .zero,
        jitter: Double = 0.1,
        minimumDelay: Duration = .milliseconds(100)
    ) {
        self.enabled = enabled
        self.maxAttempts = maxAttempts
        self.initialDelay = DelayArithmetic.bounded(initialDelay)
        self.maxDelay = DelayArithmetic.bounded(maxDelay)
        self.backoffMultiplier = DelayArithmetic.clamp(backoffMultiplier, to: 1...1e6)
        self.backoffIncrement = DelayArithmetic.bounded(backoffIncrement)
        self.jitter = DelayArithmetic.clamp(jitter, to: 0...1)
        self.minimumDelay = DelayArithmetic.bounded(minimumDelay)
    }

    /// Creates a strategy from seconds, as seed 004's `RetryPolicy` does; every argument has a
    /// default: 1 s, doubling, up to 60 s, ±10%, no limit on attempts.
    public init(
        enabled: Bool = true,
        maxAttempts: Int? = nil,
        initialDelay: Double = 1,
        maxDelay: Double = 60,
        backoffMultiplier: Double = 2,
        jitter: Double = 0.1,
        minimumDelay: Double = 0.1
    ) {
        self.init(
            enabled: enabled,
            maxAttempts: maxAttempts,
            initialDelay: DelayArithmetic.duration(seconds: initialDelay),
            maxDelay: DelayArithmetic.duration(seconds: maxDelay),
            backoffMultiplier: backoffMultiplier,
            jitter: jitter,
            minimumDelay: DelayArithmetic.duration(seconds: minimumDelay)
        )
    }

    /// A custom strategy: `delayForAttempt` returns the wait before attempt `n` (from 0), or nil
    /// to stop trying.
    public init(maxAttempts: Int? = nil, delayForAttempt: @escaping @Sendable (_ attempt: Int) -> Duration?) {
        self.init(maxAttempts: maxAttempts, initialDelay: .zero, jitter: 0)
        self.custom = delayForAttempt
    }

    /// A custom strategy in seconds, as seed 001 writes it: `delayForAttempt` returns the wait
    /// before attempt `n` (from 0).
    public init(maxAttempts: Int? = nil, delayForAttempt: @escaping @Sendable (_ attempt: Int) -> Double) {
        self.init(maxAttempts: maxAttempts) { attempt -> Duration? in
            DelayArithmetic.duration(seconds: delayForAttempt(attempt))
        }
    }

    /// The wait before attempt `attempt` (from 0), or nil when the strategy gives up.
    public func delay(forAttempt attempt: Int) -> Duration? {
        delay(forAttempt: attempt, suggested: nil)
    }

    /// The wait before attempt `attempt`, where a server's suggestion, if any, replaces
    /// `initialDelay` (clamped to `minimumDelay...maxDelay`); nil when the strategy gives up.
    func delay(forAttempt attempt: Int, suggested: Duration?) -> Duration? {
        guard enabled else { return nil }
        if let maxAttempts, attempt >= maxAttempts { return nil }
        if let custom { return custom(attempt).map(DelayArithmetic.bounded) }
        let limit = max(DelayArithmetic.seconds(minimumDelay), DelayArithmetic.seconds(maxDelay))
        let base = suggested.map { DelayArithmetic.clamp(DelayArithmetic.seconds($0), to: DelayArithmetic.seconds(minimumDelay)...limit) }
        return DelayArithmetic.backoff(
            base: base ?? DelayArithmetic.seconds(initialDelay),
            multiplier: backoffMultiplier,
            increment: DelayArithmetic.seconds(backoffIncrement),
            attempt: attempt,
            limit: base == nil ? DelayArithmetic.seconds(maxDelay) : limit,
            jitter: jitter,
            random: jitterSource ?? { Double.random(in: $0) }
        )
    }

    /// A server's `Retry-After`, clamped to `minimumDelay...maxDelay`.
    func bounded(retryAfter: Duration) -> Duration {
        let limit = max(DelayArithmetic.seconds(minimumDelay), DelayArithmetic.seconds(maxDelay))
        return DelayArithmetic.duration(
            seconds: DelayArithmetic.clamp(DelayArithmetic.seconds(retryAfter), to: DelayArithmetic.seconds(minimumDelay)...limit))
    }

    /// Never reconnect.
    public static let none = ReconnectionStrategy(enabled: false, maxAttempts: 0, initialDelay: .zero)

    /// Never reconnect (the same as ``none``).
    public static let disabled = none

    /// Doubles the delay after each attempt, from `baseDelay` up to `maxDelay`, each delay
    /// varied by up to ±`jitter` (a fraction, default 0.2).
    public static func exponentialBackoff(
        baseDelay: Duration = .seconds(1),
        maxDelay: Duration = .seconds(30),
        maxAttempts: Int? = nil,
        jitter: Double = 0.2
    ) -> ReconnectionStrategy {
        ReconnectionStrategy(maxAttempts: maxAttempts, initialDelay: baseDelay, maxDelay: maxDelay, backoffMultiplier: 2, jitter: jitter)
    }

    /// ``exponentialBackoff(baseDelay:maxDelay:maxAttempts:jitter:)`` in seconds, as seed 001
    /// writes it: `.exponentialBackoff(baseDelay: 1.0, maxDelay: 30.0, maxAttempts: 10)`.
    public static func exponentialBackoff(
        baseDelay: Double,
        maxDelay: Double = 30,
        maxAttempts: Int? = nil,
        jitter: Double = 0.2
    ) -> ReconnectionStrategy {
        .exponentialBackoff(
            baseDelay: DelayArithmetic.duration(seconds: baseDelay),
            maxDelay: DelayArithmetic.duration(seconds: maxDelay),
            maxAttempts: maxAttempts,
            jitter: jitter
        )
    }

    /// The same delay before every attempt.
    public static func fixedDelay(_ delay: Duration, maxAttempts: Int? = nil) -> ReconnectionStrategy {
        ReconnectionStrategy(maxAttempts: maxAttempts, initialDelay: delay, maxDelay: delay, backoffMultiplier: 1, jitter: 0, minimumDelay: .zero)
    }

    /// The same delay before every attempt, in seconds: `.fixedDelay(5.0)`.
    public static func fixedDelay(_ seconds: Double, maxAttempts: Int? = nil) -> ReconnectionStrategy {
        .fixedDelay(DelayArithmetic.duration(seconds: seconds), maxAttempts: maxAttempts)
    }

    /// `step`, then 2 × `step`, 3 × `step` … up to `maxDelay`.
    public static func linearBackoff(
        step: Duration = .seconds(1),
        maxDelay: Duration = .seconds(30),
        maxAttempts: Int? = nil
    ) -> ReconnectionStrategy {
        ReconnectionStrategy(
            maxAttempts: maxAttempts, initialDelay: step, maxDelay: maxDelay, backoffMultiplier: 1, backoffIncrement: step, jitter: 0)
    }

    /// ``linearBackoff(step:maxDelay:maxAttempts:)`` in seconds.
    public static func linearBackoff(step: Double, maxDelay: Double = 30, maxAttempts: Int? = nil) -> ReconnectionStrategy {
        .linearBackoff(step: DelayArithmetic.duration(seconds: step), maxDelay: DelayArithmetic.duration(seconds: maxDelay), maxAttempts: maxAttempts)
    }
}

/// The name seed 004 gives the retry model of its SSE client: the same type as
/// ``ReconnectionStrategy``, so both clients share one model.
public typealias RetryPolicy = ReconnectionStrategy
