package import Logging
import NIOConcurrencyHelpers
import NIOCore

/// Fans elements out to any number of `AsyncStream` consumers: each consumer that asks gets
/// its own stream, and every element reaches every consumer, in one order.
///
/// Each consumer buffers by its ``StreamBuffering``:
/// - lossless (the default): nothing is dropped. A consumer more than `limit` elements or
///   `byteLimit` bytes behind closes the ``DemandGate`` its producer checks, and opens it again
///   once it is back under half of both. The buffer can pass the limit by what the producer had
///   already read when the gate closed, no more.
/// - newest / oldest: bounded by their own limit, dropping old or new elements. Drops are
///   counted in ``droppedCount`` and logged as a warning: the first, then one line per 10,000.
///
/// Consumers are pulled: a consumer's stream asks for its next element, so a consumer that
/// lets go of its stream (or whose task is cancelled) is removed at once.
package final class Broadcaster<Element: Sendable>: Sendable {
    /// A consumer waiting for its next element. Unsafe, not checked: a checked continuation's
    /// layout is opaque to this module, so each copy and destroy would ask the runtime for its
    /// type, several times per element. Each waiter is resumed exactly once: it is taken out of
    /// the state under the lock by whoever resumes it (`yield`, `finish`, `remove`, or `next`
    /// itself when an element arrived first).
    private typealias Waiter = UnsafeContinuation<Element?, Never>

    private struct Consumer {
        var buffer = CircularBuffer<Element>()
        var bytes = 0
        var waiter: Waiter?
        let buffering: StreamBuffering.Kind
        var behind = false
        /// It asked for an element at least once: someone iterates its stream.
        var read = false
    }

    private struct State {
        var nextID: UInt64 = 0
        var consumers: [UInt64: Consumer] = [:]
        var finished = false
        var dropped = 0
        /// Elements kept for the first consumer, until there is one (see `keepsForFirstConsumer`).
        var early = CircularBuffer<Element>()
        var hadConsumer = false
        /// Called once every consumer waits for its next element (``whenIdle(_:)``). One at a
        /// time: a newer one supersedes it, so that a stream nobody reads cannot collect them.
        var idleWatcher: (@Sendable () -> Void)?
        /// The watcher no longer waits for streams that were never read (``stopWaitingForUnread()``).
        var unreadAreIdle = false

        /// Every consumer has taken all it was given and waits for more (or none is left):
        /// whatever it did with the last element is done. Once ``unreadAreIdle``, a stream that
        /// was never read is not waited for.
        var isIdle: Bool { finished || consumers.values.allSatisfy { $0.waiter != nil || (unreadAreIdle && !$0.read) } }

        /// The idle watchers to call (outside the lock), when idle now.
        mutating func takeIdleWatchers() -> [@Sendable () -> Void] {
            guard let watcher = idleWatcher, isIdle else { return [] }
            idleWatcher = nil
            return [watcher]
        }
    }

    private let state = NIOLockedValueBox(State())
    private let limit: Int
    private let byteLimit: Int
    private let cost: (@Sendable (Element) -> Int)?
    private let buffering: StreamBuffering
    private let gate: DemandGate?
    private let label: String
    private let logger: Logger
    private let keepsForFirstConsumer: Int

    /// - Parameters:
    ///   - limit: how many unread elements a lossless consumer may hold before it holds the
    ///     producer back.
    ///   - byteLimit: the same in bytes, weighed by `cost`; with no `cost`, only `limit` counts.
    ///   - buffering: the default for streams that do not ask for their own.
    ///   - gate: closed while a lossless consumer is behind; nil for a producer that cannot wait
    ///     (then lossless consumers simply grow).
    ///   - keepsForFirstConsumer: until a first consumer asks, keep up to this many elements
    ///     (the oldest) and hand them to it: an in-memory peer that has nothing to hold back.
    package init(
        limit: Int,
        byteLimit: Int = .max,
        cost: (@Sendable (Element) -> Int)? = nil,
        buffering: StreamBuffering = .lossless,
        gate: DemandGate? = nil,
        label: String,
        logger: Logger,
        keepsForFirstConsumer: Int = 0
    ) {
        self.keepsForFirstConsumer = keepsForFirstConsumer
        self.limit = max(limit, 2)
        self.byteLimit = max(byteLimit, 2)
        self.cost = cost
        self.buffering = buffering
        self.gate = gate
        self.label = label
        self.logger = logger
    }

    /// A new stream that starts with `first`, if given, then gets every later element.
    package func makeStream(startingWith first: Element? = nil, buffering: StreamBuffering? = nil) -> AsyncStream<Element> {
        let id = state.withLockedValue { state in
            state.nextID += 1
            var consumer = Consumer(buffering: (buffering ?? self.buffering).kind)
            if let first { consumer.buffer.append(first) }
            if !state.hadConsumer {
                state.hadConsumer = true
                consumer.buffer.append(contentsOf: state.early)
                state.early = CircularBuffer()
            }
            state.consumers[state.nextID] = consumer
            return state.nextID
        }
        let token = ConsumerToken(broadcaster: self, id: id)
        return AsyncStream(unfolding: { await token.next() }, onCancel: { token.cancel() })
    }

    /// Sends `element` to every consumer, in the same order for all.
    ///
    /// Consumers waiting for it are resumed after the lock is released: a consumer whose task is
    /// being cancelled at that moment holds its task's lock while its stream's cancellation
    /// handler waits for this one (``remove(_:)``), and resuming it needs the task's lock.
    package func yield(_ element: Element) {
        // The consumers woken are kept in plain locals, the first inline, so that the usual
        // single consumer costs no allocation (a struct nested in this generic class would be
        // destroyed through the runtime's metadata cache, once per element).
        typealias Woken = (first: Waiter?, more: [Waiter])
        let (logged, woken) = state.withLockedValue { state -> (Int?, Woken) in
            var woken: Woken = (nil, [])
            guard !state.consumers.isEmpty else {
                if !state.hadConsumer, state.early.count < keepsForFirstConsumer { state.early.append(element) }
                return (nil, woken)
            }
            var dropped = 0
            var index = state.consumers.values.startIndex
            while index != state.consumers.values.endIndex {
                let (waiter, lost) = deliver(element, to: &state.consumers.values[index])
                dropped += lost
                if let waiter {
                    if woken.first == nil { woken.first = waiter } else { woken.more.append(waiter) }
                }
                state.consumers.values.formIndex(after: &index)
            }
            guard dropped > 0 else { return (nil, woken) }
            let before = state.dropped
            state.dropped += dropped
            return (before == 0 || before / 10_000 != state.dropped / 10_000 ? state.dropped : nil, woken)
        }
        woken.first?.resume(returning: element)
        for waiter in woken.more { waiter.resume(returning: element) }
        if let logged {
            logger.warning(
                "a consumer is not reading its stream: elements dropped",
                metadata: ["stream": "\(label)", "dropped so far": "\(logged)"]
            )
        }
    }

    /// Delivers to one consumer, under the lock. Returns the consumer's waiter, if it waited (to
    /// be resumed with the element once the lock is released), and how many elements were
    /// dropped.
    private func deliver(_ element: Element, to consumer: inout Consumer) -> (Waiter?, Int) {
        if let waiter = consumer.waiter {
            consumer.waiter = nil
            return (waiter, 0)
        }
        switch consumer.buffering {
        case .lossless:
            consumer.buffer.append(element)
            if let cost { consumer.bytes += cost(element) }
            if !consumer.behind, consumer.buffer.count >= limit || consumer.bytes >= byteLimit {
                consumer.behind = true
                gate?.consumerFellBehind()
            }
            return (nil, 0)
        case .newest(let most):
            consumer.buffer.append(element)
            guard consumer.buffer.count > most else { return (nil, 0) }
            consumer.buffer.removeFirst()
            return (nil, 1)
        case .oldest(let most):
            guard consumer.buffer.count < most else { return (nil, 1) }
            consumer.buffer.append(element)
            return (nil, 0)
        }
    }

    private enum Take {
        case element(Element)
        case end
        case empty
    }

    /// Takes the consumer's next element, under the lock; when none waits, stores `waiter`.
    private func take(_ id: UInt64, waiter: Waiter?) -> (Take, (@Sendable () -> Void)?) {
        state.withLockedValue { state in
            // In place, through the index: a copy of the consumer (even to compare it with nil)
            // would copy its whole buffer, and ask the runtime for its type, on every take.
            guard let index = state.consumers.index(forKey: id) else { return (.end, nil) }
            let finished = state.finished
            let taken = take(from: &state.consumers.values[index], finished: finished, waiter: waiter)
            if case .end = taken.0 { state.consumers.remove(at: index) }
            // A consumer came back for more: the last to do so makes the broadcaster idle.
            if case .empty = taken.0, waiter != nil, state.idleWatcher != nil {
                let watchers = state.takeIdleWatchers()
                if !watchers.isEmpty { return (taken.0, { for watcher in watchers { watcher() } }) }
            }
            return taken
        }
    }

    /// Calls `body` (at once, or later outside every lock) once every consumer has taken all it
    /// was given and waits for its next element, or the stream finished: what the consumers did
    /// with the elements so far is done. A consumer that stops reading keeps it waiting: the
    /// caller bounds the wait, and may stop waiting for streams never read sooner
    /// (``stopWaitingForUnread()``).
    ///
    /// One watcher waits at a time. A newer one supersedes it, and the superseded one is called at
    /// once (its caller has bounded its wait and goes on): so a stream that is kept but never read
    /// holds one closure, however many waits were asked of it.
    package func whenIdle(_ body: @escaping @Sendable () -> Void) {
        let (now, superseded) = state.withLockedValue { state -> (Bool, (@Sendable () -> Void)?) in
            state.unreadAreIdle = false
            if state.isIdle { return (true, nil) }
            defer { state.idleWatcher = body }
            return (false, state.idleWatcher)
        }
        superseded?()
        if now { body() }
    }

    /// The ``whenIdle(_:)`` watcher stops waiting for streams that were made but never read
    /// (asked for, and not iterated yet): it is called now if only those keep it waiting.
    package func stopWaitingForUnread() {
        let watchers = state.withLockedValue { state in
            state.unreadAreIdle = true
            return state.takeIdleWatchers()
        }
        for watcher in watchers { watcher() }
    }

    /// Whether a ``whenIdle(_:)`` watcher waits (for tests).
    package var hasIdleWatcher: Bool { state.withLockedValue { $0.idleWatcher != nil } }

    private func take(
        from consumer: inout Consumer,
        finished: Bool,
        waiter: Waiter?
    ) -> (Take, (@Sendable () -> Void)?) {
        consumer.read = true
        guard let element = consumer.buffer.popFirst() else {
            if finished { return (.end, nil) }
            if let waiter { consumer.waiter = waiter }
            return (.empty, nil)
        }
        if let cost, case .lossless = consumer.buffering { consumer.bytes -= cost(element) }
        if consumer.behind, consumer.buffer.count <= limit / 2, consumer.bytes <= byteLimit / 2 {
            consumer.behind = false
            return (.element(element), gate?.consumerCaughtUp())
        }
        return (.element(element), nil)
    }

    fileprivate func next(_ id: UInt64) async -> Element? {
        let (first, opened) = take(id, waiter: nil)
        opened?()
        switch first {
        case .element(let element): return element
        case .end: return nil
        case .empty: break
        }
        return await withUnsafeContinuation { (continuation: Waiter) in
            let (taken, opened) = take(id, waiter: continuation)
            opened?()
            switch taken {
            case .element(let element): continuation.resume(returning: element)
            case .end: continuation.resume(returning: nil)
            case .empty: break  // stored: yield, finish or cancel resumes it
            }
        }
    }

    /// Removes a consumer: its stream was cancelled or let go of.
    fileprivate func remove(_ id: UInt64) {
        let (waiter, opened, idle) = state.withLockedValue { state -> (Waiter?, (@Sendable () -> Void)?, [@Sendable () -> Void]) in
            guard let consumer = state.consumers.removeValue(forKey: id) else { return (nil, nil, []) }
            return (consumer.waiter, consumer.behind ? gate?.consumerCaughtUp() : nil, state.takeIdleWatchers())
        }
        waiter?.resume(returning: nil)
        opened?()
        for watcher in idle { watcher() }
    }

    /// Ends every stream once its reader has read what it holds; later consumers get only their
    /// first element, if any. Nothing is held back any more.
    package func finish() {
        let (waiters, opened) = state.withLockedValue { state -> ([Waiter], [@Sendable () -> Void]) in
            state.finished = true
            var opened = state.takeIdleWatchers()
            var waiters: [Waiter] = []
            for (id, consumer) in state.consumers {
                if let waiter = consumer.waiter {
                    waiters.append(waiter)
                    state.consumers[id] = nil
                } else if consumer.behind {
                    state.consumers[id]?.behind = false
                    if let hook = gate?.consumerCaughtUp() { opened.append(hook) }
                }
            }
            return (waiters, opened)
        }
        for waiter in waiters { waiter.resume(returning: nil) }
        for hook in opened { hook() }
    }

    /// How many elements were dropped for consumers with a dropping ``StreamBuffering``.
    package var droppedCount: Int { state.withLockedValue { $0.dropped } }

    /// How many elements the consumers hold unread, in all (for tests and benchmarks).
    package var bufferedCount: Int { state.withLockedValue { $0.consumers.values.reduce(0) { $0 + $1.buffer.count } } }

    /// How many consumers are attached.
    package var consumerCount: Int { state.withLockedValue { $0.consumers.count } }
}

/// One consumer's handle, held by its stream: when the stream goes away, so does the consumer.
private final class ConsumerToken<Element: Sendable>: Sendable {
    let broadcaster: Broadcaster<Element>
    let id: UInt64

    init(broadcaster: Broadcaster<Element>, id: UInt64) {
        self.broadcaster = broadcaster
        self.id = id
    }

    func next() async -> Element? {
        await broadcaster.next(id)
    }

    func cancel() {
        broadcaster.remove(id)
    }

    deinit {
        broadcaster.remove(id)
    }
}
