import DequeModule
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// A chat member's outgoing text frames, written straight to its channel on the channel's event
/// loop: no task wakes up per frame, and a room's fan-out costs one event-loop job per member.
///
/// It keeps ``OutboundQueue``'s promises:
/// - **Bounded.** Frames accepted but not yet written to the socket count against `maxCount`
///   and `maxBytes`; past either, ``offer(_:)`` refuses, and the member is closed (a reader that
///   does not read holds its frames in the channel, where they still count).
/// - **In order.** Frames are written in the order ``offer(_:)`` accepted them, after the ones
///   given to ``start(with:)`` (the welcome and backlog), which come first whenever they arrive.
/// - **Stalls.** While stalled (a fault), nothing is written; what is offered meanwhile waits.
///
/// Frames go out uncompressed, which RFC 7692 allows on a connection that negotiated
/// permessage-deflate; the server uses this writer only where no extension was negotiated.
final class ChannelTextWriter: Sendable {
    private struct State {
        var counted = (count: 0, bytes: 0)
        /// Accepted, not yet written: the text and whether it counts against the bounds.
        var pending = Deque<(text: String, counted: Bool)>()
        var started = false
        var stalledUntil: NIODeadline?
        var finished = false
        var drainScheduled = false
        /// Frames handed to the channel whose writes have not completed yet.
        var inFlight = 0
        var completed = false

        /// Whether everything accepted is written and nothing more will be: true once.
        mutating func completeIfDone() -> Bool {
            guard finished, started, inFlight == 0, pending.isEmpty, !completed else { return false }
            completed = true
            return true
        }
    }

    private let channel: any Channel
    private let state = NIOLockedValueBox(State())
    private let done: EventLoopPromise<Void>
    let maxCount: Int
    let maxBytes: Int

    init(channel: any Channel, maxCount: Int, maxBytes: Int) {
        self.channel = channel
        self.maxCount = max(maxCount, 1)
        self.maxBytes = max(maxBytes, 1)
        self.done = channel.eventLoop.makePromise()
    }

    deinit {
        // A member refused before it was served never starts its writer.
        done.succeed()
    }

    /// Accepts `text` for writing; false, accepting nothing, when that would pass either bound
    /// or the writer was finished.
    func offer(_ text: String) -> Bool {
        let size = text.utf8.count
        let (accepted, schedule) = state.withLockedValue { state -> (Bool, Bool) in
            guard !state.finished, state.counted.count < maxCount,
                state.counted.count == 0 || state.counted.bytes + size <= maxBytes
            else { return (false, false) }
            state.counted.count += 1
            state.counted.bytes += size
            state.pending.append((text, true))
            return (true, Self.claimDrain(&state))
        }
        if schedule { scheduleDrain() }
        return accepted
    }

    /// Writes `first` (not counted against the bounds) ahead of everything offered so far, then
    /// lets the rest go.
    func start(with first: [String]) {
        let schedule = state.withLockedValue { state -> Bool in
            state.pending.insert(contentsOf: first.map { ($0, false) }, at: 0)
            state.started = true
            return Self.claimDrain(&state)
        }
        if schedule { scheduleDrain() }
    }

    /// Writes nothing for `duration`; a later stall replaces an earlier one.
    func stall(for duration: Duration) {
        let until = NIODeadline.now() + TimeAmount(duration)
        state.withLockedValue { $0.stalledUntil = until }
        channel.eventLoop.scheduleTask(deadline: until) { [self] in
            let schedule = state.withLockedValue { state -> Bool in
                guard state.stalledUntil == until else { return false }
                state.stalledUntil = nil
                return Self.claimDrain(&state)
            }
            if schedule { drain() }
        }
    }

    /// Accepts nothing more; ``written()`` returns once what was accepted is written.
    func finish() {
        let schedule = state.withLockedValue { state -> Bool in
            state.finished = true
            state.started = true  // a member that ends before its welcome still completes
            return Self.claimDrain(&state)
        }
        if schedule { scheduleDrain() }
    }

    /// Returns once the writer is finished and everything it accepted was written to the
    /// socket, or failed to be because the connection closed; or when the task is cancelled.
    func written() async {
        let returned = channel.eventLoop.makePromise(of: Void.self)
        done.futureResult.cascade(to: returned)
        await withTaskCancellationHandler {
            try? await returned.futureResult.get()
        } onCancel: {
            returned.succeed()  // completing a completed promise does nothing
        }
    }

    /// Whether a drain should be scheduled now; marks it scheduled.
    private static func claimDrain(_ state: inout State) -> Bool {
        guard !state.drainScheduled else { return false }
        state.drainScheduled = true
        return true
    }

    private func scheduleDrain() {
        if channel.eventLoop.inEventLoop {
            drain()
        } else {
            channel.eventLoop.execute { self.drain() }
        }
    }

    /// On the event loop: writes what is pending, flushes once, and completes `done` when the
    /// writer is finished and nothing is left.
    private func drain() {
        let (batch, finishedNow) = state.withLockedValue { state -> ([(text: String, counted: Bool)], Bool) in
            state.drainScheduled = false
            guard state.started, state.stalledUntil == nil else { return ([], false) }
            let batch = Array(state.pending)
            state.pending.removeAll()
            state.inFlight += batch.count
            return (batch, state.completeIfDone())
        }
        if finishedNow { done.succeed() }
        guard !batch.isEmpty else { return }
        // Writes on a channel complete in order, and a failed one fails those after it: the
        // last write's promise stands for the whole batch.
        let promise = channel.eventLoop.makePromise(of: Void.self)
        for (index, item) in batch.enumerated() {
            let frame = WebSocketFrame(fin: true, opcode: .text, data: channel.allocator.buffer(string: item.text))
            channel.write(frame, promise: index == batch.count - 1 ? promise : nil)
        }
        let counted = batch.filter(\.counted)
        let (count, bytes) = (counted.count, counted.reduce(0) { $0 + $1.text.utf8.count })
        promise.futureResult.whenComplete { [self] _ in
            let complete = state.withLockedValue { state -> Bool in
                state.counted.count -= count
                state.counted.bytes -= bytes
                state.inFlight -= batch.count
                return state.completeIfDone()
            }
            if complete { done.succeed() }
        }
        channel.flush()
    }
}
