package import DuplexWire
import DequeModule
import NIOConcurrencyHelpers
package import NIOCore
import NIOWebSocket

/// A chat member's outgoing text frames, written straight to its channel on the channel's event
/// loop: no task wakes up per frame, and a room's fan-out costs one event-loop job per event
/// loop (``LoopDrains``), not one per member.
///
/// Frames arrive encoded (``ServerTextFrame``): a room event's bytes are encoded once and shared
/// by every member. They enter the pipeline just before swift-nio's frame encoder, through a
/// ``RawFrameOutlet``, so that whatever sits nearer the socket still sees them.
///
/// Its promises (an SSE stream's ``EventStreamWriter`` keeps the same):
/// - **Bounded.** Frames accepted but not yet handed to the channel count against `maxCount` and
///   `maxBytes` (text bytes); past either, ``offer(_:)`` refuses, and the member is closed. The
///   writer hands frames over only while the channel is writable: a reader that does not read
///   fills its socket, then the channel up to its high watermark (64 KiB), then this queue.
/// - **In order.** Frames are written in the order ``offer(_:)`` accepted them, after the ones
///   given to ``start(with:)`` (the welcome and backlog), which come first whenever they arrive.
/// - **Stalls.** While stalled (a fault), nothing is written; what is offered meanwhile waits.
///
/// On a connection that negotiated permessage-deflate (``WriterDeflate``), frames of at least
/// the threshold go out compressed, each on its own with the event loop's shared compressor; a
/// room event's compressed frame is made once and shared (``DeflatedFrameCache``). The others
/// go out uncompressed, which RFC 7692 allows.
package final class ChannelTextWriter: Sendable {
    /// A frame to write, the text bytes it counts against the bounds (nil: not counted), and
    /// where its compressed form is shared, for a room event.
    private typealias Item = (frame: ByteBuffer, counted: Int?, deflated: DeflatedFrameCache?)

    private struct State {
        var counted = (count: 0, bytes: 0)
        /// Accepted, not yet written.
        var pending = Deque<Item>()
        var started = false
        var stalledUntil: NIODeadline?
        var finished = false
        var drainScheduled = false
        var completed = false
        /// A drain is handing frames to the channel (which can call back in, when it becomes
        /// writable during a flush); another one asked for meanwhile runs after it, in order.
        var draining = false
        var drainAgain = false

        /// Whether everything accepted is handed to the channel and nothing more will be: true
        /// once.
        mutating func completeIfDone() -> Bool {
            guard finished, started, pending.isEmpty, !completed else { return false }
            completed = true
            return true
        }
    }

    private let channel: any Channel
    private let drains: LoopDrains
    private let state = NIOLockedValueBox(State())
    private let outlet: FrameOutlet
    private let deflate: WriterDeflate?
    private let done: EventLoopPromise<Void>
    package let maxCount: Int
    package let maxBytes: Int

    /// A writer for `channel`, through its `outlet`, drained with the other writers of its event
    /// loop in `drains`.
    /// With `deflate`, frames are compressed as it agreed.
    package init(channel: any Channel, outlet: FrameOutlet, drains: LoopDrains, maxCount: Int, maxBytes: Int, deflate: WriterDeflate? = nil) {
        precondition(drains.eventLoop === channel.eventLoop, "a writer is drained on its channel's event loop")
        precondition(deflate.map { $0.zlib === drains.zlib } ?? true, "a writer compresses with its event loop's streams")
        self.channel = channel
        self.outlet = outlet
        self.deflate = deflate
        self.drains = drains
        self.maxCount = max(maxCount, 1)
        self.maxBytes = max(maxBytes, 1)
        self.done = channel.eventLoop.makePromise()
        // Frames held back while the channel was not writable go once it is again. A strong
        // reference: the outlet lets it go when it leaves the pipeline, as it does when the
        // channel closes (a weak one would make every retain of the writer take the slow path).
        let outlet = self.outlet
        let resume = { @Sendable in
            outlet.handler.onWritable = { self.drain() }
        }
        if channel.eventLoop.inEventLoop { resume() } else { channel.eventLoop.execute(resume) }
    }

    deinit {
        // A member refused before it was served never starts its writer.
        done.succeed()
    }

    /// Accepts `text` for writing; false, accepting nothing, when that would pass either bound
    /// or the writer was finished.
    package func offer(_ text: String) -> Bool {
        offer(frame: ServerTextFrame.encode(text), textBytes: text.utf8.count)
    }

    /// Accepts a text frame encoded by ``ServerTextFrame`` (a room event's shared bytes, with
    /// its shared compressed form), whose text is `size` bytes, for writing; false, accepting
    /// nothing, when that would pass either bound or the writer was finished.
    ///
    /// On the writer's event loop, the frame is handed to the channel at once (when nothing is
    /// ahead of it, within the loop's budget for this turn: ``LoopDrains/mayDrainNow()``);
    /// elsewhere, in the loop's next batch. No caller holds a lock that closing the channel
    /// would take: a room delivers outside its lock.
    ///
    /// With `batched`, the frame waits for the loop's batch even on the loop, where it goes out
    /// with whatever else the member gets in this turn: for presence, which many joins at once
    /// send to everyone, and whose latency matters less than a message's.
    package func offer(frame: ByteBuffer, textBytes size: Int, deflated: DeflatedFrameCache? = nil, batched: Bool = false) -> Bool {
        accept(CollectionOfOne((frame: frame, textBytes: size, deflated: deflated)), batched: batched)
    }

    /// Accepts `frames` (each with the text bytes it counts) in order, as
    /// ``offer(frame:textBytes:deflated:batched:)`` accepts one, and drains once for them all:
    /// they go out in one write. False at the first that would pass a bound; the ones before it
    /// are accepted.
    ///
    /// An array, not any sequence: a chat room calls this for every member, from another module,
    /// where a generic parameter would run unspecialized (about 7% more CPU per delivery at
    /// 1,000 members, docs/benchmarks.md).
    package func offer(_ frames: [(frame: ByteBuffer, textBytes: Int, deflated: DeflatedFrameCache?)], batched: Bool) -> Bool {
        accept(frames, batched: batched)
    }

    private func accept(_ frames: some Sequence<(frame: ByteBuffer, textBytes: Int, deflated: DeflatedFrameCache?)>, batched: Bool) -> Bool {
        let (accepted, schedule) = state.withLockedValue { state -> (Bool, Bool) in
            var accepted = true
            for (frame, size, deflated) in frames {
                guard !state.finished, state.counted.count < maxCount,
                    state.counted.count == 0 || state.counted.bytes + size <= maxBytes
                else {
                    accepted = false
                    break
                }
                state.counted.count += 1
                state.counted.bytes += size
                state.pending.append((frame, size, deflated))
            }
            return (accepted, !state.pending.isEmpty && Self.claimDrain(&state))
        }
        if schedule {
            if batched { drains.schedule(self) } else { drainSoon() }
        }
        return accepted
    }

    /// Writes `first` (not counted against the bounds) ahead of everything offered so far, then
    /// lets the rest go.
    package func start(with first: [String]) {
        let frames = first.map { Item(ServerTextFrame.encode($0), nil, nil) }
        let schedule = state.withLockedValue { state -> Bool in
            state.pending.insert(contentsOf: frames, at: 0)
            state.started = true
            return Self.claimDrain(&state)
        }
        if schedule { drainSoon() }
    }

    /// Writes nothing for `duration`; a later stall replaces an earlier one.
    package func stall(for duration: Duration) {
        let until = channel.eventLoop.now + TimeAmount(duration)
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
    package func finish() {
        let schedule = state.withLockedValue { state -> Bool in
            state.finished = true
            state.started = true  // a member that ends before its welcome still completes
            return Self.claimDrain(&state)
        }
        if schedule { drainSoon() }
    }

    /// Accepts nothing more and drops what is not yet handed to the channel: the connection is
    /// closing, and no data frame may follow its close frame.
    package func discard() {
        let complete = state.withLockedValue { state -> Bool in
            state.finished = true
            state.started = true
            for item in state.pending { Self.uncount(item, in: &state) }
            state.pending.removeAll()
            return state.completeIfDone()
        }
        if complete { done.succeed() }
    }

    /// Calls `body` on the event loop once the writer is finished and everything it accepted
    /// was handed to the channel (or dropped).
    package func whenWritten(_ body: @escaping @Sendable () -> Void) {
        done.futureResult.whenComplete { _ in body() }
    }

    /// Returns once the writer is finished and everything it accepted was handed to the
    /// channel (in order, ahead of anything written after), or dropped; or when the task is
    /// cancelled.
    package func written() async {
        let returned = channel.eventLoop.makePromise(of: Void.self)
        done.futureResult.cascade(to: returned)
        await withTaskCancellationHandler {
            try? await returned.futureResult.get()
        } onCancel: {
            returned.succeed()  // completing a completed promise does nothing
        }
    }

    /// Drains now on the writer's event loop (within the loop's budget for this turn), else in
    /// the loop's next batch.
    private func drainSoon() {
        if drains.eventLoop.inEventLoop, drains.mayDrainNow() { drain() } else { drains.schedule(self) }
    }

    /// `item` leaves the queue: it no longer counts against the bounds.
    private static func uncount(_ item: Item, in state: inout State) {
        guard let counted = item.counted else { return }
        state.counted.count -= 1
        state.counted.bytes -= counted
    }

    /// Whether a drain should be scheduled now; marks it scheduled.
    private static func claimDrain(_ state: inout State) -> Bool {
        guard !state.drainScheduled else { return false }
        state.drainScheduled = true
        return true
    }

    /// On the event loop: hands what is pending to the channel while it is writable, flushes
    /// once, and completes `done` when the writer is finished and nothing is left.
    ///
    /// No promise per write: what leaves the queue stops counting, and the channel's writability
    /// (its high watermark) holds back the rest, so a fan-out costs one write and one flush per
    /// member.
    package func drain() {
        drains.eventLoop.assertInEventLoop()
        while drainOnce() {}
    }

    /// One pass of ``drain()``; true when another was asked for while it wrote.
    private func drainOnce() -> Bool {
        let writable = channel.isWritable
        // A fan-out leaves one frame pending per member: that case takes no array.
        var single: Item?
        var batch: [Item] = []
        let (proceed, finishedNow) = state.withLockedValue { state -> (Bool, Bool) in
            state.drainScheduled = false
            if state.draining {
                state.drainAgain = true
                return (false, false)
            }
            guard state.started, state.stalledUntil == nil, writable, !state.pending.isEmpty else { return (false, state.completeIfDone()) }
            if state.pending.count == 1 {
                let item = state.pending.removeFirst()
                Self.uncount(item, in: &state)
                single = item
            } else {
                batch.reserveCapacity(state.pending.count)
                while let item = state.pending.popFirst() {
                    Self.uncount(item, in: &state)
                    batch.append(item)
                }
            }
            state.draining = true
            return (true, state.completeIfDone())
        }
        guard proceed else {
            if finishedNow { done.succeed() }
            return false
        }
        let context = outlet.context
        var tally = MessageTally()
        if let single {
            write(single, to: context, counting: &tally)
        } else {
            for item in batch { write(item, to: context, counting: &tally) }
        }
        drains.wrote(tally)
        context.flush()
        let again = state.withLockedValue { state -> Bool in
            state.draining = false
            defer { state.drainAgain = false }
            return state.drainAgain
        }
        if finishedNow { done.succeed() }
        return again
    }

    /// Writes `item`, compressed when it should be (``compressed(_:)``), counting it in `tally`.
    private func write(_ item: Item, to context: ChannelHandlerContext, counting tally: inout MessageTally) {
        let size = ServerTextFrame.payloadLength(of: item.frame)
        tally.sent(bytes: size)
        if let compressed = compressed(item) {
            tally.deflated(size, to: ServerTextFrame.payloadLength(of: compressed))
            context.write(NIOAny(compressed), promise: nil)
        } else {
            context.write(NIOAny(item.frame), promise: nil)
        }
    }

    /// `item`'s frame compressed, when the connection agreed to permessage-deflate and the text
    /// reaches the threshold (nil: it goes as it is); on the event loop, whose compressor it uses.
    private func compressed(_ item: Item) -> ByteBuffer? {
        guard let deflate else { return nil }
        let payload = ServerTextFrame.payload(of: item.frame)
        let agreement = deflate.agreement
        guard payload.readableBytes >= agreement.minimumBytes, agreement.sendWindowBits >= 9 else { return nil }
        let make = { () -> ByteBuffer? in
            deflate.zlib.deflate(payload, windowBits: agreement.sendWindowBits, dictionary: nil, allocator: self.channel.allocator)
                .map { ServerTextFrame.encode(payload: $0, compressed: true) }
        }
        return item.deflated.map { $0.frame(windowBits: agreement.sendWindowBits, make: make) } ?? make()
    }
}

/// How a chat member's writer compresses: what the connection agreed, and the event loop's
/// shared streams. Each message is compressed on its own, which is valid whether or not the
/// agreement keeps context (the peer's inflater only ever adds to its window).
package struct WriterDeflate: Sendable {
    package let agreement: DeflateAgreement
    package let zlib: LoopZlib

    /// Compresses as `agreement` says, with `zlib`, the event loop's streams.
    package init(agreement: DeflateAgreement, zlib: LoopZlib) {
        self.agreement = agreement
        self.zlib = zlib
    }
}

/// Where pre-encoded WebSocket frames enter a connection's pipeline: ahead of the
/// ``ConnectionGuard`` (which only reads) and of swift-nio's frame encoder, so that they go to
/// the socket as they are, with no handler between (over HTTP/2, the stream's
/// ``HTTP2WebSocketStream`` is between, which makes them DATA frames). It tells the connection's writer when the
/// channel is writable again.
package final class RawFrameOutlet: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = ByteBuffer
    package typealias OutboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer

    /// Called on the event loop when the channel becomes writable again.
    var onWritable: (() -> Void)?

    package func channelWritabilityChanged(context: ChannelHandlerContext) {
        context.fireChannelWritabilityChanged()
        if context.channel.isWritable { onWritable?() }
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        onWritable = nil
    }

    /// Adds an outlet to an upgraded WebSocket connection's pipeline; on its event loop.
    package static func install(on channel: any Channel) throws -> FrameOutlet {
        let pipeline = channel.pipeline.syncOperations
        let outlet = RawFrameOutlet()
        if let guardHandler = try? pipeline.handler(type: ConnectionGuard.self) {
            try pipeline.addHandler(outlet, position: .before(guardHandler))
        } else if let stream = try? pipeline.handler(type: HTTP2WebSocketStream<HTTP2WebSocketServerParts>.self) {
            // A WebSocket over HTTP/2: its frames go out through the stream's DATA frames.
            try pipeline.addHandler(outlet, position: .after(stream))
        } else {
            try pipeline.addHandler(outlet, position: .before(try pipeline.handler(type: WebSocketFrameEncoder.self)))
        }
        return FrameOutlet(context: try pipeline.context(handler: outlet), handler: outlet)
    }
}

/// The context of a connection's ``RawFrameOutlet``: pre-encoded frames are written there.
package struct FrameOutlet: @unchecked Sendable {
    /// Only touched on the channel's event loop (`@unchecked` for that reason: a fan-out reads
    /// it once per member and event, and a loop-bound box would check the thread every time).
    package let context: ChannelHandlerContext
    package let handler: RawFrameOutlet
}
