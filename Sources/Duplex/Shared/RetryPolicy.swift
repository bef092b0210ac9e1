/// How a ``ServerSentEventManager`` reconnects after its stream ends or fails.
///
/// The first delay is the server's `retry:` value when it sent one, else `initialDelay`. Each
/// failed attempt in a row multiplies it by `backoffMultiplier`, up to `maxDelay`, varied by up to
/// ±`jitter`. A connection that delivers an event resets the growth.
///
/// Every value a server sends is bounded: `retry:` and `Retry-After` are clamped to
/// `minimumDelay...maxDelay`, so `retry: 0` cannot make a reconnection storm and
/// `retry: 99999999999` cannot park the client for years. No delay is ever longer than one day.
///
/// ```swift
/// RetryPolicy(enabled: true, maxAttempts: 5, initialDelay: 1, maxDelay: 60, backoffMultiplier: 2)  // 1s, 2s, 4s …
/// ```
public struct RetryPolicy: Sendable, Hashable {
    /// Whether to reconnect at all.
    public var enabled: Bool
    /// The most reconnection attempts in a row; nil for no limit.
    public var maxAttempts: Int?
    /// Seconds before the first reconnection, when the server set no `retry:`.
    public var initialDelay: Double
    /// The longest delay, in seconds; it also caps the server's `retry:` and `Retry-After`.
    /// At most one day.
    public var maxDelay: Double
    /// The shortest delay, in seconds, whatever the server's `retry:` or `Retry-After` says.
    /// Default 0.1.
    public var minimumDelay: Double
    /// How much each failed attempt in a row multiplies the delay.
    public var backoffMultiplier: Double
    /// How much each delay may vary, as a fraction (0.1 = ±10%).
    public var jitter: Double
    /// Whether a 5xx or 429 answer is retried (honouring `Retry-After`) instead of failing the
    /// stream for good. Default false, as the WHATWG spec has it.
    public var retryOnServerErrors: Bool

    /// Creates a policy; every argument has a default.
    public init(
        enabled: Bool = true,
        maxAttempts: Int? = nil,
        initialDelay: Double = 1,
        maxDelay: Double = 60,
        backoffMultiplier: Double = 2,
        jitter: Double = 0.1,
        retryOnServerErrors: Bool = false,
        minimumDelay: Double = 0.1
    ) {
        self.enabled = enabled
        self.maxAttempts = maxAttempts
        self.initialDelay = DelayArithmetic.clamp(initialDelay, to: 0...DelayArithmetic.longestSeconds)
        self.maxDelay = DelayArithmetic.clamp(maxDelay, to: 0...DelayArithmetic.longestSeconds)
        self.backoffMultiplier = DelayArithmetic.clamp(backoffMultiplier, to: 1...1e6)
        self.jitter = DelayArithmetic.clamp(jitter, to: 0...1)
        self.retryOnServerErrors = retryOnServerErrors
        self.minimumDelay = DelayArithmetic.clamp(minimumDelay, to: 0...DelayArithmetic.longestSeconds)
    }

    /// Never reconnect.
    public static let disabled = RetryPolicy(enabled: false)

    /// The delay before attempt `attempt` (from 0), or nil when the policy gives up.
    /// - Parameter serverRetryMilliseconds: the server's last `retry:`, if any; it replaces
    ///   `initialDelay`, clamped to `minimumDelay...maxDelay`.
    func delay(attempt: Int, serverRetryMilliseconds: Int?) -> Duration? {
        guard enabled else { return nil }
        if let maxAttempts, attempt >= maxAttempts { return nil }
        let base = serverRetryMilliseconds.map { Double($0) / 1000 } ?? initialDelay
        return DelayArithmetic.backoff(
            base: DelayArithmetic.clamp(base, to: minimumDelay...max(minimumDelay, maxDelay)),
            multiplier: backoffMultiplier,
            attempt: attempt,
            limit: max(minimumDelay, maxDelay),
            jitter: jitter
        )
    }

    /// A server's `Retry-After`, clamped to `minimumDelay...maxDelay`.
    func bounded(retryAfter: Duration) -> Duration {
        let seconds = DelayArithmetic.seconds(retryAfter)
        return DelayArithmetic.duration(seconds: DelayArithmetic.clamp(seconds, to: minimumDelay...max(minimumDelay, maxDelay)))
    }
}
