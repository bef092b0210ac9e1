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
    func tickStream(_ request: Request, _ context: DuplexRequestContext) -> Response {
        let minimum = TickClock.milliseconds(configuration.minimumTickInterval)
        var interval = TickClock.milliseconds(configuration.tickInterval)
        if let text = request.uri.queryParameters.get("interval") {
            guard let value = Int64(text), value >= minimum, value <= 86_400_000 else {
                return Refusal(
                    status: .badRequest,
                    error: ChatProtocolError(
                        .init("invalid_interval"),
                        "interval must be an integer number of milliseconds from \(minimum) to 86400000 (got \(text.debugDescription))")
                ).response
            }
            interval = value
        }
        let lastEventID = request.headers[HTTPField.Name("Last-Event-ID")!]
        let first = ticks.firstTick(after: lastEventID, intervalMilliseconds: interval, window: Int64(configuration.historyLimit))
        let ticks = self.ticks
        let period = interval
        let eventLoop = context.channel.eventLoop
        return EventStreamResponse(server: self).response(
            info: .init(kind: .eventStream, route: "events"),
            channel: context.channel,
            trace: ConnectionTrace(request.headers, route: "events", tracer: activeTracer)
        ) { sink in
            let source = TickSource(ticks: ticks, intervalMilliseconds: period, first: first, sink: sink, eventLoop: eventLoop)
            return source.stop
        }
    }

    /// `GET /chat/{room}/events`: the room's events as SSE (`id` = `EPOCH:SEQ`, `event` =
    /// `message`, `joined` or `left`, `data` = the frame JSON), resuming after `Last-Event-ID`.
    /// An id from another epoch gets a `reset` event, then the live stream; a bare integer id
    /// (from before epochs) counts as a seq of the current epoch.
    func roomEventStream(_ request: Request, _ context: DuplexRequestContext) -> Response {
        let roomName = context.parameters.get("room") ?? ""
        do throws(ChatProtocolError) {
            try configuration.chatLimits.validate(room: roomName)
        } catch {
            return Refusal(status: .badRequest, error: error).response
        }
        let position = request.headers[HTTPField.Name("Last-Event-ID")!].flatMap(RoomStreamID.init)
        guard rooms.canHost(roomName) else {
            return ChatFrames.refusal(.roomLimit, name: "", maxRooms: configuration.maxRooms).response
        }
        let rooms = self.rooms
        return EventStreamResponse(server: self).response(
            info: .init(kind: .eventStream, route: "chat-events", room: roomName),
            channel: context.channel,
            trace: ConnectionTrace(request.headers, route: "chat-events", tracer: activeTracer)
        ) { sink -> EventStreamResponse.Stop in
            let subscriber = RoomSubscriber(
                member: nil,
                deliver: { event in EventStreamResponse.yield(event.sse, to: sink) },
                onOverflow: {}
            )
            // A position from another epoch: its history is gone. Say so, ahead of every event, with
            // an id in the new epoch, so the client's Last-Event-ID moves on; then the new
            // epoch's kept events follow from its start.
            let prelude = { (recovered: Bool?, epoch: String, latestSeq: Int) in
                guard recovered == false, let previous = position?.epoch else { return }
                let reset = ChatHistoryReset(room: roomName, epoch: epoch, previousEpoch: previous, latestSeq: latestSeq)
                let data = (try? ChatProtocol.makeEncoder().encode(reset)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
                // Its id is the start of the new epoch: the kept events of the epoch follow.
                let text = (try? ServerSentEvent(id: RoomStreamID(epoch: epoch, seq: 0).description, event: "reset", data: data).encoded()) ?? ""
                _ = EventStreamResponse.yield(text, to: sink)
            }
            // Rooms filled up since the check, or the store is unavailable: the stream ends, and
            // the client retries.
            let subscribed = await rooms.subscribe(
                room: roomName,
                subscriber,
                since: position?.seq,
                epoch: position?.epoch,
                deliverBacklog: true,
                prelude: prelude
            )
            guard case .success(let (room, subscription)) = subscribed else {
                if case .failure(.unavailable(let why)) = subscribed {
                    self.logger.warning(
                        "a room stream ended at once: the room store is unavailable", metadata: ["room": "\(roomName)", "error": "\(why)"])
                }
                sink.finish()
                return {}
            }
            return { room.unsubscribe(subscription.id) }
        }
    }
}

/// `/events`' ticks, put in a stream's sink by a timer on the connection's event loop, each at
/// its instant on the server's tick clock: no task per stream.
final class TickSource: Sendable {
    private let ticks: TickClock
    private let intervalMilliseconds: Int64
    private let sink: OutboundQueue
    private let eventLoop: any EventLoop
    private let state = NIOLockedValueBox((timer: Scheduled<Void>?.none, stopped: false))

    /// Starts at tick `first`.
    init(ticks: TickClock, intervalMilliseconds: Int64, first: Int64, sink: OutboundQueue, eventLoop: any EventLoop) {
        self.ticks = ticks
        self.intervalMilliseconds = intervalMilliseconds
        self.sink = sink
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

    /// Puts tick `n`, and every tick already due after it, in the sink; then waits for the next.
    private func schedule(_ n: Int64) {
        let delay = TimeAmount(max(ticks.instant(ofTick: n, intervalMilliseconds: intervalMilliseconds) - .now, .zero))
        state.withLockedValue { state in
            guard !state.stopped else { return }
            state.timer = eventLoop.scheduleTask(in: delay) { self.fire(n) }
        }
    }

    private func fire(_ n: Int64) {
        var n = n
        // A tick replayed from `Last-Event-ID` is due at once: the backlog goes out in one go.
        while ticks.instant(ofTick: n, intervalMilliseconds: intervalMilliseconds) <= .now {
            let text = (try? TickClock.event(tick: n, intervalMilliseconds: intervalMilliseconds).encoded()) ?? ""
            guard EventStreamResponse.yield(text, to: sink) else { return }
            n += 1
        }
        schedule(n)
    }
}
