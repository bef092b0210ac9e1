import DequeModule
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// A chat member's outgoing text frames, written straight to its channel on the channel's event
/// loop: no task wakes up per frame, and a room's fan-out costs one event-loop job per event
/// loop (``LoopDrains``), not one per member.
///
/// Frames arrive encoded (``ServerTextFrame``): a room event's bytes are encoded once and shared
/// by every member. They enter the pipeline just before swift-nio's frame encoder, through a
/// ``RawFrameOutlet``, so that whatever sits nearer the socket still sees them.
///
/// It keeps ``OutboundQueue``'s promises:
/// - **Bounded.** Frames accepted but not yet written to the socket count against `maxCount`
///   and `maxBytes` (text bytes); past either, ``offer(_:)`` refuses, and the member is closed (a
///   reader that does not read holds its frames in the channel, where they still count).
/// - **In order.** Frames are written in the order ``offer(_:)`` accepted them, after the ones
///   given to ``start(with:)`` (the welcome and backlog), which come first whenever they arrive.
/// - **Stalls.** While stalled (a fault), nothing is written; what is offered meanwhile waits.
///
/// On a connection that negotiated permessage-deflate (``WriterDeflate``), frames of at least
/// the threshold go out compressed, each on its own with the event loop's shared compressor; a
/// room event's compressed frame is made once and shared (``DeflatedFrameCache``). The others
/// go out uncompressed, which RFC 7692 allows.
final class ChannelTextWriter: Sendable {
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
    private let drains: LoopDrains
    private let state = NIOLockedValueBox(State())
    private let outlet: FrameOutlet
    private let deflate: WriterDeflate?
    private let done: EventLoopPromise<Void>
    let maxCount: Int
    let maxBytes: Int

    /// A writer for `channel`, through its `outlet`, drained with the other writers of its event
    /// loop in `drains`.
    /// With `deflate`, frames are compressed as it agreed.
    init(channel: any Channel, outlet: FrameOutlet, drains: LoopDrains, maxCount: Int, maxBytes: Int, deflate: WriterDeflate? = nil) {
        precondition(drains.eventLoop === channel.eventLoop, "a writer is drained on its channel's event loop")
        precondition(deflate.map { $0.zlib === drains.zlib } ?? true, "a writer compresses with its event loop's streams")
        self.channel = channel
        self.outlet = outlet
        self.deflate = deflate
        self.drains = drains
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
        offer(frame: ServerTextFrame.encode(text))
    }

    /// Accepts a text frame encoded by ``ServerTextFrame`` (a room event's shared bytes, with
    /// its shared compressed form) for writing; false, accepting nothing, when that would pass
    /// either bound or the writer was finished.
    func offer(frame: ByteBuffer, deflated: DeflatedFrameCache? = nil) -> Bool {
        let size = ServerTextFrame.payload(of: frame).readableBytes
        let (accepted, schedule) = state.withLockedValue { state -> (Bool, Bool) in
            guard !state.finished, state.counted.count < maxCount,
                state.counted.count == 0 || state.counted.bytes + size <= maxBytes
            else { return (false, false) }
            state.counted.count += 1
            state.counted.bytes += size
            state.pending.append((frame, size, deflated))
            return (true, Self.claimDrain(&state))
        }
        if schedule { drains.schedule(self) }
        return accepted
    }

    /// Writes `first` (not counted against the bounds) ahead of everything offered so far, then
    /// lets the rest go.
    func start(with first: [String]) {
        let frames = first.map { Item(ServerTextFrame.encode($0), nil, nil) }
        let schedule = state.withLockedValue { state -> Bool in
            state.pending.insert(contentsOf: frames, at: 0)
            state.started = true
            return Self.claimDrain(&state)
        }
        if schedule { drains.schedule(self) }
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
        if schedule { drains.schedule(self) }
    }

    /// Accepts nothing more and drops what is not yet handed to the channel: the connection is
    /// closing, and no data frame may follow its close frame.
    func discard() {
        let complete = state.withLockedValue { state -> Bool in
            state.finished = true
            state.started = true
            for item in state.pending {
                if let counted = item.counted {
                    state.counted.count -= 1
                    state.counted.bytes -= counted
                }
            }
            state.pending.removeAll()
            return state.completeIfDone()
        }
        if complete { done.succeed() }
    }

    /// Calls `body` on the event loop once the writer is finished and everything it accepted
    /// was written (or dropped, or failed with the connection).
    func whenWritten(_ body: @escaping @Sendable () -> Void) {
        done.futureResult.whenComplete { _ in body() }
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

    /// On the event loop: writes what is pending, flushes once, and completes `done` when the
    /// writer is finished and nothing is left.
    func drain() {
        drains.eventLoop.assertInEventLoop()
        // A fan-out leaves one frame pending per member: that case takes no array.
        var single: Item?
        var batch: [Item] = []
        let (total, count, bytes, finishedNow) = state.withLockedValue { state -> (Int, Int, Int, Bool) in
            state.drainScheduled = false
            guard state.started, state.stalledUntil == nil, !state.pending.isEmpty else { return (0, 0, 0, state.completeIfDone()) }
            var (total, count, bytes) = (0, 0, 0)
            if state.pending.count == 1 {
                let item = state.pending.removeFirst()
                single = item
                (total, count, bytes) = (1, item.counted == nil ? 0 : 1, item.counted ?? 0)
            } else {
                batch.reserveCapacity(state.pending.count)
                while let item = state.pending.popFirst() {
                    batch.append(item)
                    total += 1
                    if let counted = item.counted { (count, bytes) = (count + 1, bytes + counted) }
                }
            }
            state.inFlight += total
            return (total, count, bytes, false)
        }
        if finishedNow { done.succeed() }
        guard total > 0 else { return }
        let written = drains.eventLoop.makePromise(of: Void.self)
        written.futureResult.whenComplete { [self] _ in
            let complete = state.withLockedValue { state -> Bool in
                state.counted.count -= count
                state.counted.bytes -= bytes
                state.inFlight -= total
                return state.completeIfDone()
            }
            if complete { done.succeed() }
        }
        let context = outlet.context
        if let single {
            context.write(NIOAny(outgoing(single)), promise: written)
        } else {
            // Writes on a channel complete in order, and a failed one fails those after it: the
            // last write's promise stands for the whole batch.
            for (index, item) in batch.enumerated() {
                context.write(NIOAny(outgoing(item)), promise: index == batch.count - 1 ? written : nil)
            }
        }
        context.flush()
    }

    /// The frame to write for `item`: compressed when the connection agreed to permessage-deflate
    /// and the text reaches the threshold; on the event loop, whose compressor it uses.
    private func outgoing(_ item: Item) -> ByteBuffer {
        guard let deflate else { return item.frame }
        let payload = ServerTextFrame.payload(of: item.frame)
        let agreement = deflate.agreement
        guard payload.readableBytes >= agreement.minimumBytes, agreement.serverWindowBits >= 9 else { return item.frame }
        let make = { () -> ByteBuffer? in
            deflate.zlib.deflate(payload, windowBits: agreement.serverWindowBits, dictionary: nil, allocator: self.channel.allocator)
                .map { ServerTextFrame.encode(payload: $0, compressed: true) }
        }
        let compressed = item.deflated.map { $0.frame(windowBits: agreement.serverWindowBits, make: make) } ?? make()
        return compressed ?? item.frame
    }
}

/// How a chat member's writer compresses: what the connection agreed, and the event loop's
/// shared streams. Each message is compressed on its own, which is valid whether or not the
/// agreement keeps context (the peer's inflater only ever adds to its window).
struct WriterDeflate: Sendable {
    let agreement: ServerDeflateAgreement
    let zlib: LoopZlib
}

/// Where pre-encoded WebSocket frames enter a connection's pipeline: ahead of the
/// ``ConnectionGuard`` (which only reads) and of swift-nio's frame encoder, so that they go to
/// the socket as they are, with no handler between.
final class RawFrameOutlet: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Adds an outlet to an upgraded WebSocket connection's pipeline; on its event loop.
    static func install(on channel: any Channel) throws -> FrameOutlet {
        let pipeline = channel.pipeline.syncOperations
        let outlet = RawFrameOutlet()
        if let guardHandler = try? pipeline.handler(type: ConnectionGuard.self) {
            try pipeline.addHandler(outlet, position: .before(guardHandler))
        } else {
            try pipeline.addHandler(outlet, position: .before(try pipeline.handler(type: WebSocketFrameEncoder.self)))
        }
        return FrameOutlet(context: try pipeline.context(handler: outlet))
    }
}

/// The context of a connection's ``RawFrameOutlet``: pre-encoded frames are written there.
struct FrameOutlet: @unchecked Sendable {
    /// Only touched on the channel's event loop (`@unchecked` for that reason: a fan-out reads
    /// it once per member and event, and a loop-bound box would check the thread every time).
    let context: ChannelHandlerContext
}
