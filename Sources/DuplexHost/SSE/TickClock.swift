package import DuplexSchema
import Foundation

/// Numbers the ticks of `GET /events`: tick `n` of an interval is due at `n × interval` after the
/// Unix epoch, so ids are the same across server restarts and any recent tick can be rebuilt,
/// which is how a `Last-Event-ID` resumes exactly.
///
/// Wall-clock time is read once, at start; after that the monotonic clock moves it forward, so
/// ids never go backwards while the server runs.
package struct TickClock: Sendable {
    private let wallStartMilliseconds: Int64
    private let start: ContinuousClock.Instant

    package init() {
        self.wallStartMilliseconds = Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
        self.start = .now
    }

    /// The wall-clock time now, in milliseconds since the epoch, advanced by the monotonic clock.
    func nowMilliseconds() -> Int64 {
        wallStartMilliseconds + Self.milliseconds(start.duration(to: .now))
    }

    /// The newest tick that is due.
    package func currentTick(intervalMilliseconds: Int64) -> Int64 {
        nowMilliseconds() / intervalMilliseconds
    }

    /// When tick `n` is due, on the monotonic clock.
    package func instant(ofTick n: Int64, intervalMilliseconds: Int64) -> ContinuousClock.Instant {
        start.advanced(by: .milliseconds(n * intervalMilliseconds - wallStartMilliseconds))
    }

    /// The first tick to send to a client that last saw `lastEventID`, keeping `window` ticks.
    ///
    /// - No id, or one that is not an integer: the next tick (the live stream).
    /// - An id within the window: the tick after it, at once if it is due.
    /// - An id older than the window: the oldest tick kept.
    /// - An id ahead of the current tick: the next tick.
    package func firstTick(after lastEventID: String?, intervalMilliseconds: Int64, window: Int64) -> Int64 {
        let current = currentTick(intervalMilliseconds: intervalMilliseconds)
        guard let lastEventID, let last = Int64(lastEventID) else { return current + 1 }
        if last > current { return current + 1 }
        return max(last, current - max(window, 1)) + 1
    }

    /// The SSE event for tick `n`: `id: n`, `event: tick`, `data: {"n":n,"at":"<ISO-8601>"}`.
    package static func event(tick n: Int64, intervalMilliseconds: Int64) -> ServerSentEvent {
        let at = Date(timeIntervalSince1970: Double(n * intervalMilliseconds) / 1000)
        return ServerSentEvent(id: String(n), event: "tick", data: #"{"n":\#(n),"at":"\#(ChatTimestamp.format(at))"}"#)
    }

    package static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1000 + attoseconds / 1_000_000_000_000_000
    }
}
