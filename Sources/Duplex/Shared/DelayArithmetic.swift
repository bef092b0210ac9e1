import Foundation

/// Delay arithmetic that cannot trap: every delay the retry model computes goes through here, so a
/// hostile server value (`retry:`, `Retry-After`) or an extreme configuration ends in a bounded
/// delay, never in an overflow.
enum DelayArithmetic {
    /// The longest delay any retry model waits: one day. A longer `maxDelay` is treated as this.
    static let longestSeconds: Double = 86_400

    /// `seconds` clamped to `0...min(limit, longestSeconds)`; NaN counts as the limit.
    static func duration(seconds: Double, limit: Double = longestSeconds) -> Duration {
        let ceiling = clamp(limit, to: 0...longestSeconds)
        let bounded = seconds.isNaN ? ceiling : min(max(seconds, 0), ceiling)
        return .nanoseconds(Int64((bounded * 1e9).rounded()))
    }

    /// `duration` clamped to `0...longestSeconds`.
    static func bounded(_ duration: Duration) -> Duration {
        self.duration(seconds: seconds(duration))
    }

    /// `value` within `range`; NaN becomes the upper bound.
    static func clamp(_ value: Double, to range: ClosedRange<Double>) -> Double {
        value.isNaN ? range.upperBound : min(max(value, range.lowerBound), range.upperBound)
    }

    /// A duration as seconds.
    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) * 1e-18
    }

    /// `base × multiplier^attempt + increment × attempt`, capped at `limit`, varied by up to
    /// ±`jitter` (a fraction), and never beyond `limit × (1 + jitter)` nor ``longestSeconds``.
    /// `random` draws the jitter's factor from a range (the system's generator unless a
    /// simulation gives its seeded one).
    static func backoff(
        base: Double, multiplier: Double, increment: Double = 0, attempt: Int, limit: Double, jitter: Double,
        random: @Sendable (ClosedRange<Double>) -> Double = { Double.random(in: $0) }
    ) -> Duration {
        let ceiling = clamp(limit, to: 0...longestSeconds)
        var seconds = clamp(base, to: 0...ceiling)
        let factor = clamp(multiplier, to: 1...1e6)
        let step = clamp(increment, to: 0...longestSeconds)
        var done = 0
        while done < attempt, seconds < ceiling {
            seconds = min(seconds * factor + step, ceiling)
            done += 1
        }
        let spread = clamp(jitter, to: 0...1)
        if spread > 0, seconds > 0 { seconds *= random((1 - spread)...(1 + spread)) }
        return duration(seconds: min(seconds, longestSeconds))
    }

    /// `Retry-After` as seconds or an HTTP date.
    static func retryAfter(_ value: String) -> Duration? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if !trimmed.isEmpty, trimmed.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            // Digits only: seconds, however many (a huge value is clamped by the policy).
            return DelayArithmetic.duration(seconds: Double(trimmed) ?? DelayArithmetic.longestSeconds)
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return DelayArithmetic.duration(seconds: date.timeIntervalSinceNow)
    }
}
