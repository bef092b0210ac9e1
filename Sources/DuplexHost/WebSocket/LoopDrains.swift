package import DuplexWire
import NIOConcurrencyHelpers
package import NIOCore

/// What the connections of one event loop share: the ``ChannelTextWriter``s that have frames to
/// write, drained together (a room's fan-out to 1,000 members on one event loop costs one
/// event-loop job, not 1,000), and the loop's zlib streams for permessage-deflate. It also
/// counts the frames its writers write, and adds them to the metrics once per turn of the loop.
package final class LoopDrains: Sendable {
    package let eventLoop: any EventLoop
    /// The loop's zlib streams, for the connections that compress; use them only on the loop.
    package let zlib = LoopZlib()
    private let pending = NIOLockedValueBox<(writers: [ChannelTextWriter], scheduled: Bool)>(([], false))
    /// How many writers may still drain at once in this turn of the loop, and what they wrote in
    /// it.
    private let tick = Tick()
    /// Where what the writers wrote is counted: the chat route's metrics.
    private let metrics: ServerMetrics.Route

    /// This turn's state: touched only on the loop, several times per member of a fan-out, so
    /// the loop is checked in debug builds only (`assertInEventLoop`), not on every access as
    /// `NIOLoopBoundBox` does (measured: 6% more CPU per delivery at 1,000 members with it).
    private final class Tick: @unchecked Sendable {
        var budget = LoopDrains.immediateDrainsPerTick
        var resetScheduled = false
        var written = MessageTally()
    }

    /// How many writers may drain at once (a write system call each) in one turn of the event
    /// loop. One fan-out to a large room fits, so its first members are written while the rest
    /// are still being queued; past it, what more is offered in the same turn (many joins at
    /// once, each announced to the whole room) waits for the loop's batch, where a member's
    /// frames go out together in one write.
    package static let immediateDrainsPerTick = 2_048

    package init(eventLoop: any EventLoop, metrics: ServerMetrics.Route) {
        self.eventLoop = eventLoop
        self.metrics = metrics
    }

    /// On the loop: whether a writer may drain at once rather than in the loop's next batch.
    /// Takes one from this turn's budget, which is full again once the loop has run the jobs
    /// queued behind this turn.
    package func mayDrainNow() -> Bool {
        eventLoop.assertInEventLoop()
        guard tick.budget > 0 else { return false }
        tick.budget -= 1
        endTurnSoon()
        return true
    }

    /// On the loop: a writer wrote what `tally` counts.
    package func wrote(_ tally: MessageTally) {
        eventLoop.assertInEventLoop()
        tick.written.add(tally)
        endTurnSoon()
    }

    /// Queues the end of this turn behind the jobs already queued: the budget fills again, and
    /// what was written is added to the metrics, once.
    private func endTurnSoon() {
        guard !tick.resetScheduled else { return }
        tick.resetScheduled = true
        let (tick, metrics, eventLoop) = (self.tick, self.metrics, self.eventLoop)
        eventLoop.execute {
            eventLoop.assertInEventLoop()
            metrics.add(&tick.written)
            tick.budget = Self.immediateDrainsPerTick
            tick.resetScheduled = false
        }
    }

    /// Drains `writer` in the loop's next batch: one job for every writer scheduled before it
    /// runs.
    ///
    /// For writers offered frames from another thread, or past this turn's budget of drains at
    /// once (``mayDrainNow()``).
    package func schedule(_ writer: ChannelTextWriter) {
        let first = pending.withLockedValue { pending -> Bool in
            pending.writers.append(writer)
            defer { pending.scheduled = true }
            return !pending.scheduled
        }
        if first {
            eventLoop.execute { self.run() }
        }
    }

    private func run() {
        let writers = pending.withLockedValue { pending -> [ChannelTextWriter] in
            pending.scheduled = false
            defer { pending.writers.removeAll(keepingCapacity: true) }
            return pending.writers
        }
        for writer in writers { writer.drain() }
    }
}

/// A server's ``LoopDrains``, one per event loop, made on first use.
package final class WriterDrains: Sendable {
    private let loops = NIOLockedValueBox<[ObjectIdentifier: LoopDrains]>([:])
    private let metrics: ServerMetrics.Route

    /// Drains that count what they write in `metrics`.
    package init(metrics: ServerMetrics.Route) {
        self.metrics = metrics
    }

    /// The drains of `eventLoop`.
    package func drains(for eventLoop: any EventLoop) -> LoopDrains {
        loops.withLockedValue { loops in
            let key = ObjectIdentifier(eventLoop)
            if let drains = loops[key] { return drains }
            let drains = LoopDrains(eventLoop: eventLoop, metrics: metrics)
            loops[key] = drains
            return drains
        }
    }
}
