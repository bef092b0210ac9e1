/// How a ``ServerSentEventManager`` reconnects after its stream ends or fails.
///
/// The first delay is the server's `retry:` value when it sent one, else `initialDelay`. Each
/// failed attempt in a row multiplies it by `backoffMultiplier`, up to `maxDelay`, varied by up to
/// ±`jitter`. A connection that delivers an event resets the growth.
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
    /// The longest delay, in seconds.
    public var maxDelay: Double
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
        retryOnServerErrors: Bool = false
    ) {
        self.enabled = enabled
        self.maxAttempts = maxAttempts
        self.initialDelay = max(initialDelay, 0)
        self.maxDelay = max(maxDelay, 0)
        self.backoffMultiplier = max(backoffMultiplier, 1)
        self.jitter = min(max(jitter, 0), 1)
        self.retryOnServerErrors = retryOnServerErrors
    }

    /// Never reconnect.
    public static let disabled = RetryPolicy(enabled: false)

    /// The delay before attempt `attempt` (from 0) when the base delay is `base` seconds, or nil
    /// when the policy gives up.
    func delay(attempt: Int, base: Double) -> Duration? {
        guard enabled else { return nil }
        if let maxAttempts, attempt >= maxAttempts { return nil }
        var seconds = base
        for _ in 0..<min(attempt, 64) { seconds *= backoffMultiplier }
        seconds = min(seconds, max(maxDelay, base))
        if jitter > 0, seconds > 0 { seconds *= Double.random(in: (1 - jitter)...(1 + jitter)) }
        return .nanoseconds(Int64(seconds * 1e9))
    }
}
