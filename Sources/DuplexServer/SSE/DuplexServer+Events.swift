import DuplexHost
import DuplexSchema
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import NIOCore

extension DuplexServer {
    /// `GET /events[?interval=MS]`: `id: n`, `event: tick`, `data: {"n":n,"at":"…"}` every
    /// interval, resuming after `Last-Event-ID` (see ``TickClock``).
    func tickStream(_ stream: StreamRequest) -> StreamAnswer {
        let request = stream.request
        let minimum = TickClock.milliseconds(configuration.minimumTickInterval)
        var interval = TickClock.milliseconds(configuration.tickInterval)
        if let text = request.uri.queryParameters.get("interval") {
            guard let value = Int64(text), value >= minimum, value <= 86_400_000 else {
                return Refusal(
                    status: .badRequest,
                    error: ChatProtocolError(
                        .init("invalid_interval"),
                        "interval must be an integer number of milliseconds from \(minimum) to 86400000 (got \(text.debugDescription))")
                ).answer
            }
            interval = value
        }
        let lastEventID = request.headers[HTTPField.Name("Last-Event-ID")!]
        let first = ticks.firstTick(after: lastEventID, intervalMilliseconds: interval, window: Int64(configuration.historyLimit))
        let ticks = self.ticks
        let period = interval
        let eventLoop = stream.eventLoop
        return .stream(
            EventStream(route: "events", headers: request.headers, tracer: activeTracer) { writer in
                TickSource(ticks: ticks, intervalMilliseconds: period, first: first, writer: writer, eventLoop: eventLoop).stop
            })
    }

    /// `GET /chat/{room}/events`: the room's events as SSE (`id` = `EPOCH:SEQ`, `event` =
    /// `message`, `joined` or `left`, `data` = the frame JSON), resuming after `Last-Event-ID`.
    /// An id from another epoch gets a `reset` event, then the live stream; a bare integer id
    /// (from before epochs) counts as a seq of the current epoch.
    func roomEventStream(_ stream: StreamRequest) -> StreamAnswer {
        let request = stream.request
        let roomName = stream.captures["room"] ?? ""
        do throws(ChatProtocolError) {
            try configuration.chatLimits.validate(room: roomName)
        } catch {
            return Refusal(status: .badRequest, error: error).answer
        }
        let position = request.headers[HTTPField.Name("Last-Event-ID")!].flatMap(RoomStreamID.init)
        guard rooms.canHost(roomName) else {
            return ChatFrames.refusal(.roomLimit, name: "", maxRooms: configuration.maxRooms).answer
        }
        let rooms = self.rooms
        let logger = self.logger
        let eventLoop = stream.eventLoop
        return .stream(
            EventStream(route: "chat-events", room: roomName, headers: request.headers, tracer: activeTracer) { writer -> EventStream.Stop in
                let subscriber = RoomSubscriber(
                    member: nil,
                    deliver: { event in writer.send(event.sseText) },
                    onOverflow: {}
                )
                // A position from another epoch: its history is gone. Say so, ahead of every event, with
                // an id in the new epoch, so the client's Last-Event-ID moves on; then the new
                // epoch's kept events follow from its start.
                let prelude = { @Sendable (recovered: Bool?, epoch: String, latestSeq: Int) in
                    guard recovered == false, let previous = position?.epoch else { return }
                    let reset = ChatHistoryReset(room: roomName, epoch: epoch, previousEpoch: previous, latestSeq: latestSeq)
                    let data = (try? ChatProtocol.makeEncoder().encode(reset)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
                    // Its id is the start of the new epoch: the kept events of the epoch follow.
                    let text = (try? ServerSentEvent(id: RoomStreamID(epoch: epoch, seq: 0).description, event: "reset", data: data).encoded()) ?? ""
                    writer.send(text)
                }
                // The store subscribes, at once or once a database answers; the stream is stopped by
                // whichever comes last, the subscription or the stop.
                let stop = SubscriptionStop()
                let subscribed: @Sendable (Result<(ChatRoom, ChatRoom.Subscription), ChatStoreRefusal>) -> Void = { subscribed in
                    // Rooms filled up since the check, or the store is unavailable: the stream ends,
                    // and the client retries.
                    guard case .success(let (room, subscription)) = subscribed else {
                        if case .failure(.unavailable(let why)) = subscribed {
                            logger.warning(
                                "a room stream ended at once: the room store is unavailable", metadata: ["room": "\(roomName)", "error": "\(why)"])
                        }
                        writer.finish()
                        return
                    }
                    stop.subscribed { rooms.leave(subscription, member: nil, from: room) }
                }
                switch rooms.join(
                    room: roomName, subscriber, since: position?.seq, epoch: position?.epoch, deliverBacklog: true, prelude: prelude, on: eventLoop)
                {
                case .now(let result): subscribed(result)
                case .later(let future): future.whenSuccess(subscribed)
                }
                return stop.stop
            })
    }
}

/// How a room stream stops: unsubscribes once subscribed, whichever of the two comes first.
final class SubscriptionStop: Sendable {
    private let state = NIOLockedValueBox((unsubscribe: (@Sendable () -> Void)?.none, stopped: false))

    /// The subscription was made; `unsubscribe` ends it.
    func subscribed(_ unsubscribe: @escaping @Sendable () -> Void) {
        let stopped = state.withLockedValue { state in
            if !state.stopped { state.unsubscribe = unsubscribe }
            return state.stopped
        }
        if stopped { unsubscribe() }
    }

    /// The stream ended.
    @Sendable func stop() {
        let unsubscribe = state.withLockedValue { state in
            state.stopped = true
            defer { state.unsubscribe = nil }
            return state.unsubscribe
        }
        unsubscribe?()
    }
}

/// `/events`' ticks, put in a stream's writer by a timer on the connection's event loop, each at
/// its instant on the server's tick clock: no task per stream.
final class TickSource: Sendable {
    private let ticks: TickClock
    private let intervalMilliseconds: Int64
    private let writer: EventStreamWriter
    private let eventLoop: any EventLoop
    private let state = NIOLockedValueBox((timer: Scheduled<Void>?.none, stopped: false))

    /// Starts at tick `first`.
    init(ticks: TickClock, intervalMilliseconds: Int64, first: Int64, writer: EventStreamWriter, eventLoop: any EventLoop) {
        self.ticks = ticks
        self.intervalMilliseconds = intervalMilliseconds
        self.writer = writer
        self.eventLoop = eventLoop
        schedule(first)
    }

    /// No more ticks.
    @Sendable func stop() {
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
