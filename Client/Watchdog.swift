import NIOConcurrencyHelpers

/// A timer that fails a task group when it is not reset in time: the way to bound each step of
/// an exchange that waits on a stream.
final class Watchdog: Sendable {
    private let limit: Duration
    private let state: NIOLockedValueBox<(deadline: ContinuousClock.Instant, reason: String)>

    init(limit: Duration) {
        self.limit = limit
        self.state = NIOLockedValueBox((ContinuousClock.now + limit, "timed out"))
    }

    /// Starts the limit again from now; `reason` is the error when it passes.
    func reset(because reason: String) {
        state.withLockedValue { $0 = (ContinuousClock.now + limit, reason) }
    }

    /// Returns never: throws a timeout ``Failure`` once a deadline passes without a reset.
    func run() async throws {
        while true {
            let deadline = state.withLockedValue { $0.deadline }
            try await Task.sleep(until: deadline)
            let (current, reason) = state.withLockedValue { ($0.deadline, $0.reason) }
            if current <= ContinuousClock.now { throw Failure(.timeout, reason) }
        }
    }
}
