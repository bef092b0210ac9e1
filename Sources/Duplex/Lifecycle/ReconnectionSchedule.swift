/// The retry count of a ``ConnectionLifecycle``: the attempts in a row since the last connection
/// that proved itself, and the ``ReconnectionStrategy``'s wait for each.
struct ReconnectionSchedule: Sendable {
    let strategy: ReconnectionStrategy
    /// Attempts started since the last connection proved itself.
    private(set) var attempts = 0

    init(strategy: ReconnectionStrategy) {
        self.strategy = strategy
    }

    /// A connection proved itself (a WebSocket opened; an event stream delivered an event): the
    /// next loss starts the backoff over.
    mutating func connectionProved() {
        attempts = 0
    }

    /// The wait before the next attempt, and its number (from 0), counting it; nil when the
    /// strategy gives up. `suggested` is a server's wish (SSE `retry:`), `overriding` a wait the
    /// server imposed (`Retry-After`); both are clamped to the strategy's bounds.
    mutating func nextAttempt(suggested: Duration? = nil, overriding: Duration? = nil) -> (attempt: Int, delay: Duration)? {
        guard var delay = strategy.delay(forAttempt: attempts, suggested: suggested) else { return nil }
        if let overriding { delay = strategy.bounded(retryAfter: overriding) }
        defer { attempts += 1 }
        return (attempts, delay)
    }
}
