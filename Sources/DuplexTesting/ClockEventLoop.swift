import Dispatch
import NIOConcurrencyHelpers
import NIOCore

/// A swift-nio event loop whose time is a ``TestClock``'s: the server's handlers on a simulated
/// network run on it, so that their timers (a scripted route's `delay`, the engine's close
/// timeout, a stall) fire at virtual times, in order with every other sleep and event.
///
/// Its thread is the clock's executor's: ``execute(_:)`` queues a job there, a scheduled task is
/// an event of the clock (cancelled with it), and ``now`` is the clock's time as a deadline. One
/// loop per clock: everything on it runs one job at a time, as on a real event loop.
final class ClockEventLoop: EventLoop, Sendable {
    let clock: TestClock
    /// How to fail each scheduled task not yet run or cancelled, by its clock event: at the
    /// simulation's end they are failed, as a real loop fails its tasks when it shuts down (a
    /// promise let go of unfulfilled is a bug swift-nio stops on).
    private let pending = NIOLockedValueBox<[UInt64: @Sendable () -> Void]>([:])

    /// The deadline of the clock's start: far enough from zero that a deadline before it (a
    /// handler's `now - x`) is still a valid one.
    static let origin = NIODeadline.uptimeNanoseconds(1 << 40)

    init(clock: TestClock) {
        self.clock = clock
    }

    var inEventLoop: Bool { clock.isExecutorThread }

    var now: NIODeadline {
        Self.deadline(of: clock.now)
    }

    func execute(_ task: @escaping @Sendable () -> Void) {
        clock.execute(task)
    }

    func scheduleTask<T>(deadline: NIODeadline, _ task: @escaping @Sendable () throws -> T) -> Scheduled<T> {
        let promise = makePromise(of: T.self)
        // The task runs on this loop's thread (a driven clock's events run there), as NIO runs
        // scheduled tasks on their loop: what it returns never crosses threads.
        let result = Unchecked { promise.assumeIsolatedUnsafeUnchecked().completeWith(Result { try task() }) }
        let failure = Unchecked { promise.fail(EventLoopError.shutdown) }
        let id = clock.reserveID()
        pending.withLockedValue { $0[id] = { failure.value() } }
        let pending = self.pending
        clock.schedule(at: Self.instant(of: deadline), id: id) { [self] in
            guard pending.withLockedValue({ $0.removeValue(forKey: id) }) != nil else { return }
            if inEventLoop { result.value() } else { execute { result.value() } }
        }
        return Scheduled(promise: promise) { [clock] in
            clock.cancel(id)
            guard pending.withLockedValue({ $0.removeValue(forKey: id) }) != nil else { return }
            promise.fail(EventLoopError.cancelled)
        }
    }

    /// Fails every scheduled task not yet run with `EventLoopError.shutdown`: the simulation is
    /// over, and its clock will not reach them.
    func failScheduled() {
        let failures = pending.withLockedValue { pending in
            defer { pending = [:] }
            return pending.sorted { $0.key < $1.key }.map(\.value)
        }
        for fail in failures { fail() }
    }

    func scheduleTask<T>(in delay: TimeAmount, _ task: @escaping @Sendable () throws -> T) -> Scheduled<T> {
        scheduleTask(deadline: now + delay, task)
    }

    func preconditionInEventLoop(file: StaticString, line: UInt) {
        precondition(inEventLoop, "not on the simulated network's event loop", file: file, line: line)
    }

    func preconditionNotInEventLoop(file: StaticString, line: UInt) {
        precondition(!inEventLoop, "on the simulated network's event loop", file: file, line: line)
    }

    func shutdownGracefully(queue: DispatchQueue, _ callback: @escaping @Sendable ((any Error)?) -> Void) {
        queue.async { callback(nil) }
    }

    /// `instant` as a deadline of this loop.
    static func deadline(of instant: TestClock.Instant) -> NIODeadline {
        origin + TimeAmount(instant.offset)
    }

    /// `deadline` as an instant of the clock; a deadline before its start is its start.
    static func instant(of deadline: NIODeadline) -> TestClock.Instant {
        guard deadline > origin else { return TestClock.Instant() }
        return TestClock.Instant(offset: .nanoseconds(Int64(deadline.uptimeNanoseconds - origin.uptimeNanoseconds)))
    }
}

/// A value only one thread touches, carried where Swift asks for a `Sendable` one.
private struct Unchecked<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
