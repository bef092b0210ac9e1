import DuplexSchema
import Foundation
import NIOConcurrencyHelpers
package import NIOCore

/// `/events`' ticks, put in a stream's writer by a timer on the connection's event loop, each at
/// its instant on the server's tick clock: no task per stream.
package final class TickSource: Sendable {
    private let ticks: TickClock
    private let intervalMilliseconds: Int64
    private let writer: EventStreamWriter
    private let eventLoop: any EventLoop
    private let state = NIOLockedValueBox((timer: Scheduled<Void>?.none, stopped: false))

    /// Starts at tick `first`.
    package init(ticks: TickClock, intervalMilliseconds: Int64, first: Int64, writer: EventStreamWriter, eventLoop: any EventLoop) {
        self.ticks = ticks
        self.intervalMilliseconds = intervalMilliseconds
        self.writer = writer
        self.eventLoop = eventLoop
        schedule(first)
    }

    /// No more ticks.
    @Sendable package func stop() {
        state.withLockedValue { state in
            state.stopped = true
            state.timer?.cancel()
            state.timer = nil
        }
    }

    /// Gives the writer tick `n` at its instant, and every tick already due after it.
    private func schedule(_ n: Int64) {
        let delay = TimeAmount(max(ticks.instant(ofTick: n, intervalMilliseconds: intervalMilliseconds) - .now, .zero))
        state.withLockedValue { state in
            guard !state.stopped else { return }
            state.timer = eventLoop.scheduleTask(in: delay) { self.fire(n) }
        }
    }

    private func fire(_ n: Int64) {
        guard !state.withLockedValue({ $0.stopped }) else { return }
        guard isDue(n) else {
            schedule(n)
            return
        }
        // A tick replayed from `Last-Event-ID` is due at once: the backlog goes out as fast as
        // the client reads it, however long, with nothing dropped: a batch at a time (one write),
        // each once the one before was handed to the channel, and each in a turn of the event
        // loop of its own, so that a long backlog does not hold up the loop's other connections.
        guard writer.hasRoom else {
            writer.whenDrained { self.fire(n) }
            return
        }
        var next = n
        var batch: [ByteBuffer] = []
        var bytes = 0
        while isDue(next), batch.count < min(EventStreamWriter.burst, writer.maxCount) {
            let event = ByteBuffer(string: (try? TickClock.event(tick: next, intervalMilliseconds: intervalMilliseconds).encoded()) ?? "")
            // Within the writer's bounds: the batch goes to an empty queue, and all of it fits.
            guard batch.isEmpty || bytes + event.readableBytes <= writer.maxBytes else { break }
            bytes += event.readableBytes
            batch.append(event)
            next += 1
        }
        guard writer.send(batch) else { return }
        let following = next
        if isDue(following) { eventLoop.execute { self.fire(following) } } else { schedule(following) }
    }

    /// Whether tick `n`'s instant has come.
    private func isDue(_ n: Int64) -> Bool {
        ticks.instant(ofTick: n, intervalMilliseconds: intervalMilliseconds) <= .now
    }
}
