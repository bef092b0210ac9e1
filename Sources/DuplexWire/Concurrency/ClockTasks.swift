/// A clock whose timers' tasks run on an executor of its own: DuplexTesting's `TestClock`, which
/// runs every task of a simulated network's test on one thread, one at a time, in order, so that
/// the same seed makes the same events.
package protocol TaskExecutingClock: Sendable {
    /// Where the tasks started for this clock's timers and attempts run.
    var taskExecutor: any TaskExecutor { get }
}

extension Task where Failure == Never {
    /// A task that runs on `clock`'s executor when it has one (a ``TaskExecutingClock``), else as
    /// `Task { … }` does: for the tasks a client starts to wait on its clock (a retry timer, the
    /// pings, an attempt).
    @discardableResult
    package init(on clock: any Clock<Duration>, operation: sending @escaping @isolated(any) () async -> Success) {
        self.init(executorPreference: (clock as? any TaskExecutingClock)?.taskExecutor, operation: operation)
    }
}

/// The time on a clock known only as `any Clock<Duration>`, as the time since this reading was
/// made: round trips measured with it are on the clock the client was given (virtual on a test
/// clock), not on the machine's.
package struct ClockReading: Sendable {
    private let read: @Sendable () -> Duration

    package init(_ clock: any Clock<Duration>) {
        func opened<C: Clock<Duration>>(_ clock: C) -> @Sendable () -> Duration {
            let start = clock.now
            return { start.duration(to: clock.now) }
        }
        read = opened(clock)
    }

    /// The time since the reading was made.
    package func now() -> Duration {
        read()
    }
}
