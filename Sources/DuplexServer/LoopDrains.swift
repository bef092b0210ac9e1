import NIOConcurrencyHelpers
import NIOCore

/// What the connections of one event loop share: the ``ChannelTextWriter``s that have frames to
/// write, drained together (a room's fan-out to 1,000 members on one event loop costs one
/// event-loop job, not 1,000), and the loop's zlib streams for permessage-deflate.
final class LoopDrains: Sendable {
    let eventLoop: any EventLoop
    /// The loop's zlib streams, for the connections that compress; use them only on the loop.
    let zlib = LoopZlib()
    private let pending = NIOLockedValueBox<(writers: [ChannelTextWriter], scheduled: Bool)>(([], false))

    init(eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    /// Drains `writer` in the loop's next batch: one job for every writer scheduled before it
    /// runs.
    ///
    /// Never at once, even on the loop itself: a room fans out under its lock, and a write can
    /// fail and close a member's channel there and then, whose departure would take the same
    /// lock again.
    func schedule(_ writer: ChannelTextWriter) {
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
final class WriterDrains: Sendable {
    private let loops = NIOLockedValueBox<[ObjectIdentifier: LoopDrains]>([:])

    /// The drains of `eventLoop`.
    func drains(for eventLoop: any EventLoop) -> LoopDrains {
        loops.withLockedValue { loops in
            let key = ObjectIdentifier(eventLoop)
            if let drains = loops[key] { return drains }
            let drains = LoopDrains(eventLoop: eventLoop)
            loops[key] = drains
            return drains
        }
    }
}
