import DequeModule
import NIOConcurrencyHelpers
package import NIOCore

/// Where an ``EventStreamWriter`` hands its chunks, on the event loop: the stream's
/// ``EventStreamHandler``.
package protocol EventStreamOutput: AnyObject {
    /// Whether the channel takes more writes now.
    var isWritable: Bool { get }
    /// Writes the stream's next chunks, and flushes.
    func write(_ chunks: [ByteBuffer])
    /// The writer is finished and everything it accepted was written; `overflowed` says whether
    /// it finished because the reader fell behind.
    func writerFinished(overflowed: Bool)
}

/// One SSE stream's outgoing text, written to its connection on the connection's event loop by
/// its ``EventStreamHandler``: a source offers text from any thread (a room's fan-out, an
/// event-loop timer), and no task waits for it.
///
/// It keeps the promises a chat member's ``ChannelTextWriter`` keeps:
/// - **Bounded.** Text offered but not yet handed to the channel counts against `maxCount` and
///   `maxBytes`; past either, ``offer(_:)`` refuses and the stream ends (``send(_:)``), so a
///   client that does not read costs at most that, and resumes from its `Last-Event-ID`. Text is
///   handed over only while the channel is writable: a reader that does not read fills its
///   socket, then the channel up to its high watermark, then this queue.
/// - **In order**, each piece written once, as a chunk of the response body.
/// - **Stalls.** While stalled (a fault), nothing is written; what is offered meanwhile waits.
package final class EventStreamWriter: Sendable {
    private struct State {
        var pending = Deque<ByteBuffer>()
        var counted = (count: 0, bytes: 0)
        var finished = false
        var overflowed = false
        var stalledUntil: NIODeadline?
        var drainScheduled = false
        var completed = false
        /// A source with more to send, waiting until what it sent was handed to the channel.
        var whenDrained: (@Sendable () -> Void)?
    }

    private let state = NIOLockedValueBox(State())
    private let output: NIOLoopBound<any EventStreamOutput>
    package let eventLoop: any EventLoop
    package let maxCount: Int
    package let maxBytes: Int

    /// A writer that hands its chunks to `output`; on `eventLoop`, the output's.
    package init(output: any EventStreamOutput, eventLoop: any EventLoop, maxCount: Int, maxBytes: Int) {
        self.output = NIOLoopBound(output, eventLoop: eventLoop)
        self.eventLoop = eventLoop
        self.maxCount = max(maxCount, 1)
        self.maxBytes = max(maxBytes, 1)
    }

    /// Offers `text`; when it does not fit, ends the stream so that the client resumes instead.
    /// - Returns: whether it was accepted.
    @discardableResult
    package func send(_ text: String) -> Bool {
        send(ByteBuffer(string: text))
    }

    /// Offers `buffer` (an event's text, shared by every stream that sends it), as
    /// text is offered.
    @discardableResult
    package func send(_ buffer: ByteBuffer) -> Bool {
        send(CollectionOfOne(buffer))
    }

    /// Offers `buffers` in order, written together (one write); when one does not fit, ends the
    /// stream after the ones before it.
    /// - Returns: whether every one was accepted.
    @discardableResult
    package func send(_ buffers: some Collection<ByteBuffer>) -> Bool {
        if offer(buffers) { return true }
        finish()
        return false
    }

    /// How many events a source with a backlog sends in one turn of the event loop (one batch).
    package static let burst = 256

    /// Accepts `text` for writing; false, accepting nothing, when that would pass either bound
    /// or the writer was finished. One piece larger than the whole bound still goes through
    /// when nothing is waiting.
    package func offer(_ text: String) -> Bool {
        offer(ByteBuffer(string: text), counted: true)
    }

    /// Accepts `buffer`; counted against the bounds unless `counted` is false (the `retry:`
    /// field the stream starts with).
    package func offer(_ buffer: ByteBuffer, counted: Bool) -> Bool {
        guard counted else { return offer(CollectionOfOne(buffer), counted: false) }
        return offer(CollectionOfOne(buffer))
    }

    /// Accepts `buffers` in order and drains once for them all; false at the first that would
    /// pass a bound (the ones before it are accepted), or when the writer was finished.
    private func offer(_ buffers: some Collection<ByteBuffer>, counted: Bool = true) -> Bool {
        let (accepted, schedule) = state.withLockedValue { state -> (Bool, Bool) in
            guard !state.finished else { return (false, false) }
            var accepted = true
            for buffer in buffers {
                let size = buffer.readableBytes
                if counted {
                    guard state.counted.count < maxCount, state.counted.count == 0 || state.counted.bytes + size <= maxBytes else {
                        state.overflowed = true
                        accepted = false
                        break
                    }
                    state.counted.count += 1
                    state.counted.bytes += size
                }
                state.pending.append(buffer)
            }
            return (accepted, !state.pending.isEmpty && Self.claimDrain(&state))
        }
        if schedule { drainSoon() }
        return accepted
    }

    /// Accepts nothing more; the stream ends once what was accepted is written.
    package func finish() {
        let schedule = state.withLockedValue { state -> Bool in
            guard !state.finished else { return false }
            state.finished = true
            return Self.claimDrain(&state)
        }
        if schedule { drainSoon() }
    }

    /// Whether an offer was refused for passing a bound: the reader fell behind.
    package var overflowed: Bool { state.withLockedValue { $0.overflowed } }

    /// Whether everything offered so far was handed to the channel, and more is accepted: a
    /// source with a backlog to send at once (ticks or a recording replayed from an old
    /// `Last-Event-ID`) sends while this holds, then waits for ``whenDrained(_:)``, so that a
    /// burst of any length goes out at the reader's pace, whole, instead of passing the bounds.
    package var hasRoom: Bool { state.withLockedValue { $0.pending.isEmpty && !$0.finished } }

    /// Calls `body` on the event loop once everything offered so far was handed to the channel
    /// (at once, when it was); never, when the stream ends first. A later call replaces an
    /// earlier one.
    package func whenDrained(_ body: @escaping @Sendable () -> Void) {
        let now = state.withLockedValue { state -> Bool in
            guard !state.finished else { return false }
            guard state.pending.isEmpty else {
                state.whenDrained = body
                return false
            }
            return true
        }
        if now { eventLoop.execute(body) }
    }

    /// Writes nothing for `duration`; a later stall replaces an earlier one.
    package func stall(for duration: Duration) {
        let until = eventLoop.now + TimeAmount(duration)
        state.withLockedValue { $0.stalledUntil = until }
        eventLoop.scheduleTask(in: TimeAmount(duration)) { [self] in
            let schedule = state.withLockedValue { state -> Bool in
                guard state.stalledUntil == until else { return false }
                state.stalledUntil = nil
                return Self.claimDrain(&state)
            }
            if schedule { drain() }
        }
    }

    /// Whether a drain should be scheduled now; marks it scheduled.
    private static func claimDrain(_ state: inout State) -> Bool {
        guard !state.drainScheduled else { return false }
        state.drainScheduled = true
        return true
    }

    private func drainSoon() {
        if eventLoop.inEventLoop { drain() } else { eventLoop.execute { self.drain() } }
    }

    /// On the event loop: hands what is pending to the channel while it is writable, and ends
    /// the stream once the writer is finished and nothing is left.
    package func drain() {
        eventLoop.assertInEventLoop()
        let output = self.output.value
        let writable = output.isWritable
        let (items, completed, drained) = state.withLockedValue { state -> ([ByteBuffer], Bool, (@Sendable () -> Void)?) in
            state.drainScheduled = false
            guard !state.completed else { return ([], false, nil) }
            var items: [ByteBuffer] = []
            if state.stalledUntil == nil, writable, !state.pending.isEmpty {
                items.reserveCapacity(state.pending.count)
                while let item = state.pending.popFirst() { items.append(item) }
                state.counted = (0, 0)
            }
            guard state.pending.isEmpty else { return (items, false, nil) }
            defer { state.whenDrained = nil }
            guard state.finished else { return (items, false, state.whenDrained) }
            state.completed = true
            return (items, true, nil)
        }
        if !items.isEmpty { output.write(items) }
        if completed { output.writerFinished(overflowed: overflowed) }
        drained?()
    }
}
