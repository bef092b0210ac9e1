import DequeModule
import DuplexWire
import Foundation
import HeapModule
import NIOConcurrencyHelpers

/// A clock whose time moves only when a test moves it: `sleep` waits for virtual time, and
/// ``advance(by:)`` runs every sleep and event due, earliest first, each once what the one before
/// caused has run. The shape of swift-clocks' `TestClock`, for `Duration`.
///
/// ```swift
/// let clock = TestClock()
/// let socket = WebSocket(request: request, configuration: configuration, clock: clock)
/// await clock.advance(by: .seconds(30))   // the ping interval passes at once
/// ```
///
/// The tasks a `WebSocket` starts for its timers and attempts run on the clock's own
/// ``executor``: one thread, one job at a time, in the order they became ready. "What an event
/// caused has run" means that executor has nothing left to run; a task of yours that waits on the
/// clock belongs there too.
///
/// Inside ``withSimulatedNetwork(seed:link:stallTimeout:_:)`` the network drives the clock itself, and the
/// test runs on that executor too: time jumps to the next timer or delivery whenever nothing is
/// left to run, so a test writes `try await clock.sleep(for: .seconds(3600))` for an hour to
/// pass, and ``advance(by:)`` does the same.
public final class TestClock: Clock, Sendable {
    /// A point in the clock's virtual time: how long after the clock's start.
    public struct Instant: InstantProtocol, Hashable, Sendable, CustomStringConvertible {
        /// The time since the clock's start.
        public var offset: Duration

        /// The instant `offset` after the clock's start.
        public init(offset: Duration = .zero) {
            self.offset = offset
        }

        /// The instant `duration` later.
        public func advanced(by duration: Duration) -> Instant {
            Instant(offset: offset + duration)
        }

        /// The time from this instant to `other`.
        public func duration(to other: Instant) -> Duration {
            other.offset - offset
        }

        /// Whether `lhs` comes first.
        public static func < (lhs: Instant, rhs: Instant) -> Bool {
            lhs.offset < rhs.offset
        }

        /// Seconds since the start, to the millisecond: `3600.250s`.
        public var description: String {
            let millis = offset.components.seconds * 1000 + offset.components.attoseconds / 1_000_000_000_000_000
            let (seconds, rest) = millis.quotientAndRemainder(dividingBy: 1000)
            let fraction = String(rest)
            return "\(seconds).\(String(repeating: "0", count: 3 - fraction.count))\(fraction)s"
        }
    }

    /// A job of the clock's executor: a task's, or a closure.
    fileprivate enum Job {
        case task(UnownedJob)
        case closure(@Sendable () -> Void)
    }

    fileprivate enum Work {
        case resume(CheckedContinuation<Void, any Error>)
        case run(@Sendable () -> Void)
    }

    fileprivate struct Entry {
        var deadline: Instant
        var work: Work
        /// When it was scheduled.
        var setAt: Instant
    }

    /// An entry's place in the queue: its deadline, then the order it was scheduled in.
    fileprivate struct Key: Comparable {
        var deadline: Instant
        var id: UInt64

        static func < (lhs: Key, rhs: Key) -> Bool {
            (lhs.deadline, lhs.id) < (rhs.deadline, rhs.id)
        }
    }

    fileprivate struct State {
        var now = Instant()
        /// By sequence number: sleeps and events not yet due.
        var entries: [UInt64: Entry] = [:]
        /// Their order; a cancelled sleep's key stays until it comes up.
        var queue = Heap<Key>()
        var nextID: UInt64 = 0
        /// Sleeps cancelled before they were registered.
        var cancelled: Set<UInt64> = []
        /// The jobs of the clock's executor, in order: tasks' and closures' (``ClockEventLoop``'s).
        var jobs = Deque<Job>()
        /// Whether the runner thread has started, and whether it should stop.
        var running = false
        var stopping = false
        /// Callers of ``idle()``, resumed once no job is left.
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
        /// Whether the runner moves the time itself (a simulated network) rather than ``advance(by:)``.
        var driven = false
        /// Called (once) when, driven, nothing is left to run and nothing is scheduled: nothing
        /// can happen any more, and what the test waits for will not come.
        var onStall: (@Sendable () -> Void)?
        /// How long the runner waits, idle and with nothing scheduled, before it calls `onStall`.
        var stallTimeout = Duration.seconds(1)
        /// Told of each sleep that ends: when it began, and its deadline.
        var sleepObserver: (@Sendable (Instant, Instant) -> Void)?

        /// Removes the earliest entry due by `deadline` (any, when nil) and moves the time to it.
        fileprivate mutating func takeEarliest(dueBy deadline: Instant?) -> Entry? {
            while let key = queue.min, entries[key.id] == nil {
                queue.removeMin()
            }
            guard let key = queue.min, deadline.map({ key.deadline <= $0 }) ?? true,
                let entry = entries.removeValue(forKey: key.id)
            else { return nil }
            queue.removeMin()
            now = max(now, entry.deadline)
            return entry
        }
    }

    private let state: NIOLockedValueBox<State>
    /// Runs the jobs of the clock's executor, and the time when driven.
    private let runner: ClockRunner
    private var wake: DispatchSemaphore { runner.wake }

    /// A clock at its start, with nothing scheduled.
    public init() {
        state = NIOLockedValueBox(State())
        runner = ClockRunner(state: state)
    }

    deinit {
        // The runner ends once the jobs already queued have run.
        state.withLockedValue { $0.stopping = true }
        runner.wake.signal()
    }

    /// The current virtual time.
    public var now: Instant { state.withLockedValue { $0.now } }

    /// The clock's executor: one thread, one job at a time, in order. The tasks a `WebSocket`
    /// starts for its timers run on it; start yours there too
    /// (`Task(executorPreference: clock.executor) { … }`), and ``advance(by:)`` returns only once
    /// what it woke in them has run.
    public var executor: any TaskExecutor { runner }

    /// None: every instant can be reached.
    public var minimumResolution: Duration { .zero }

    /// How many sleeps and events wait for their time.
    public var scheduledCount: Int { state.withLockedValue { $0.entries.count } }

    /// Waits until the clock reaches `deadline` (at once when it has); throws
    /// `CancellationError` when the task is cancelled first.
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        try Task.checkCancellation()
        let id = state.withLockedValue { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome = state.withLockedValue { state -> Result<Void, any Error>? in
                    if state.cancelled.remove(id) != nil { return .failure(CancellationError()) }
                    if deadline <= state.now { return .success(()) }
                    state.entries[id] = Entry(deadline: deadline, work: .resume(continuation), setAt: state.now)
                    state.queue.insert(Key(deadline: deadline, id: id))
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) } else { wake.signal() }
            }
        } onCancel: {
            let entry = state.withLockedValue { state -> Entry? in
                guard let entry = state.entries.removeValue(forKey: id) else {
                    state.cancelled.insert(id)
                    return nil
                }
                return entry
            }
            if case .resume(let continuation) = entry?.work { continuation.resume(throwing: CancellationError()) }
        }
    }

    /// Lets `duration` of virtual time pass: runs every sleep and event due by then, earliest
    /// first, each once what the one before caused has run, and returns once all of it has.
    public func advance(by duration: Duration = .zero) async {
        await advance(to: now.advanced(by: duration))
    }

    /// Lets the virtual time pass up to `deadline` (see ``advance(by:)``); nothing when it has.
    public func advance(to deadline: Instant) async {
        if state.withLockedValue({ $0.driven }) {
            try? await sleep(until: deadline)
            return
        }
        while true {
            await idle()
            guard let entry = state.withLockedValue({ $0.takeEarliest(dueBy: deadline) }) else { break }
            fire(entry)
        }
        state.withLockedValue { $0.now = max($0.now, deadline) }
        await idle()
    }

    /// Runs `work` when the clock reaches `deadline` (at the next step when it has), after the
    /// sleeps and events already due then.
    @discardableResult
    package func schedule(at deadline: Instant, _ work: @escaping @Sendable () -> Void) -> UInt64 {
        let id = reserveID()
        schedule(at: deadline, id: id, work)
        return id
    }

    /// A number for an event not scheduled yet: ``schedule(at:id:_:)`` schedules it, and
    /// ``cancel(_:)`` takes it.
    package func reserveID() -> UInt64 {
        state.withLockedValue { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
    }

    /// ``schedule(at:_:)`` with a number ``reserveID()`` gave.
    package func schedule(at deadline: Instant, id: UInt64, _ work: @escaping @Sendable () -> Void) {
        state.withLockedValue { state in
            let due = max(deadline, state.now)
            state.entries[id] = Entry(deadline: due, work: .run(work), setAt: state.now)
            state.queue.insert(Key(deadline: due, id: id))
        }
        wake.signal()
    }

    /// Runs `work` on the clock's executor's thread, after the jobs already queued there.
    package func execute(_ work: @escaping @Sendable () -> Void) {
        runner.execute(work)
    }

    /// Whether the caller runs on the clock's executor's thread.
    package var isExecutorThread: Bool { runner.isCurrent }

    /// Drops an event ``schedule(at:_:)`` made, unless it has run.
    package func cancel(_ id: UInt64) {
        _ = state.withLockedValue { $0.entries.removeValue(forKey: id) }
    }

    /// Returns once the clock's executor has no job left to run.
    package func idle() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            state.withLockedValue { state in
                state.idleWaiters.append(continuation)
                runner.start(&state)
            }
            wake.signal()
        }
    }

    /// Moves the time on its own while `body` runs, on the clock's executor: whenever no job is
    /// left, to the next sleep or event. A simulated network runs its clock this way. When nothing
    /// is left to run or scheduled while `body` still waits, nothing can happen any more: after
    /// `stallTimeout` of real time to be sure, `stalled()` is thrown and `body` is cancelled
    /// (it may go on waiting, abandoned).
    package func drive<Value: Sendable>(
        stallTimeout: Duration,
        stalled: @escaping @Sendable () -> any Error,
        _ body: @escaping @Sendable () async throws -> Value
    ) async throws -> Value {
        let outcome = NIOLockedValueBox<CheckedContinuation<Value, any Error>?>(nil)
        let finish: @Sendable (Result<Value, any Error>) -> Void = { result in
            outcome.withLockedValue { waiting in
                defer { waiting = nil }
                return waiting
            }?.resume(with: result)
        }
        let work = NIOLockedValueBox<Task<Void, Never>?>(nil)
        state.withLockedValue { state in
            state.driven = true
            state.stallTimeout = stallTimeout
            state.onStall = {
                work.withLockedValue { $0 }?.cancel()
                finish(.failure(stalled()))
            }
            runner.start(&state)
        }
        wake.signal()
        defer {
            state.withLockedValue { state in
                state.driven = false
                state.onStall = nil
            }
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
                outcome.withLockedValue { $0 = continuation }
                work.withLockedValue { task in
                    task = Task(executorPreference: runner) {
                        do {
                            finish(.success(try await body()))
                        } catch {
                            finish(.failure(error))
                        }
                    }
                }
            }
        } onCancel: {
            work.withLockedValue { $0 }?.cancel()
        }
    }

    /// Tells `observer` of each sleep that ends, with the instant it began and its deadline.
    package func observeSleeps(_ observer: @escaping @Sendable (Instant, Instant) -> Void) {
        state.withLockedValue { $0.sleepObserver = observer }
    }

    /// Ends every sleep with `CancellationError` and drops every event: nothing waits on the clock
    /// once a simulation is over.
    package func cancelAll() {
        let entries = state.withLockedValue { state -> [Entry] in
            defer {
                state.entries = [:]
                state.queue = Heap()
            }
            return Array(state.entries.values)
        }
        for entry in entries {
            if case .resume(let continuation) = entry.work { continuation.resume(throwing: CancellationError()) }
        }
    }

    private func fire(_ entry: Entry) {
        runner.fire(entry)
    }
}

extension TestClock: TaskExecutingClock {
    package var taskExecutor: any TaskExecutor { executor }
}

/// The executor of a ``TestClock``, and the thread that runs it: its jobs, one at a time, in the
/// order they became ready; when the clock is driven and no job is left, the next sleep or event.
private final class ClockRunner: TaskExecutor, Sendable {
    let state: NIOLockedValueBox<TestClock.State>
    /// Wakes the thread.
    let wake = DispatchSemaphore(value: 0)

    init(state: NIOLockedValueBox<TestClock.State>) {
        self.state = state
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        state.withLockedValue { state in
            state.jobs.append(.task(job))
            start(&state)
        }
        wake.signal()
    }

    /// Starts the thread, unless it runs.
    func start(_ state: inout TestClock.State) {
        guard !state.running else { return }
        state.running = true
        let thread = Thread { [self] in run() }
        thread.name = "TestClock"
        thread.start()
    }

    /// Runs `work` on the runner's thread after the jobs already queued.
    func execute(_ work: @escaping @Sendable () -> Void) {
        state.withLockedValue { state in
            state.jobs.append(.closure(work))
            start(&state)
        }
        wake.signal()
    }

    /// The runner's thread, once it has started.
    private let thread = NIOLockedValueBox<ObjectIdentifier?>(nil)

    /// Whether the caller runs on the runner's thread.
    var isCurrent: Bool {
        thread.withLockedValue { $0 } == ObjectIdentifier(Thread.current)
    }

    private enum Step {
        case job(TestClock.Job)
        case entry(TestClock.Entry)
        case idle([CheckedContinuation<Void, Never>])
        case stop
    }

    private func run() {
        thread.withLockedValue { $0 = ObjectIdentifier(Thread.current) }
        while true {
            let step = state.withLockedValue { state -> Step in
                if let job = state.jobs.popFirst() { return .job(job) }
                if state.stopping { return .stop }
                if state.driven, let entry = state.takeEarliest(dueBy: nil) { return .entry(entry) }
                defer { state.idleWaiters = [] }
                return .idle(state.idleWaiters)
            }
            switch step {
            case .job(.task(let job)):
                job.runSynchronously(on: asUnownedTaskExecutor())
            case .job(.closure(let work)):
                work()
            case .entry(let entry):
                fire(entry)
            case .idle(let waiters):
                if waiters.isEmpty { waitForWork() }
                for waiter in waiters { waiter.resume() }
            case .stop:
                return
            }
        }
    }

    /// Waits to be woken; driven, with nothing left to run or scheduled, for the stall timeout
    /// at most, and then, if still nothing came, tells the driver that nothing can happen.
    private func waitForWork() {
        let (stuck, timeout) = state.withLockedValue { state in
            (state.driven && state.jobs.isEmpty && state.entries.isEmpty, state.stallTimeout)
        }
        guard stuck else { return wake.wait() }
        let nanoseconds = Int(timeout.components.seconds) * 1_000_000_000 + Int(timeout.components.attoseconds / 1_000_000_000)
        guard wake.wait(timeout: .now() + .nanoseconds(nanoseconds)) == .timedOut else { return }
        let onStall = state.withLockedValue { state -> (@Sendable () -> Void)? in
            guard state.driven, state.jobs.isEmpty, state.entries.isEmpty else { return nil }
            defer { state.onStall = nil }
            return state.onStall
        }
        onStall?()
    }

    func fire(_ entry: TestClock.Entry) {
        switch entry.work {
        case .resume(let continuation):
            state.withLockedValue { $0.sleepObserver }?(entry.setAt, entry.deadline)
            continuation.resume()
        case .run(let work): work()
        }
    }
}

extension TestClock.Instant: Comparable {}
