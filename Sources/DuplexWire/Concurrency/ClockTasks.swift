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
