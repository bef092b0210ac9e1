import DuplexChat
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
                return ProtocolRefusal(
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
            EventStream(route: "events", headers: request.headers, tracer: host.activeTracer) { writer in
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
            return ProtocolRefusal(status: .badRequest, error: error).answer
        }
        let position = request.headers[HTTPField.Name("Last-Event-ID")!].flatMap(RoomStreamID.init)
        guard rooms.canHost(roomName) else {
            return ChatFrames.refusal(.roomLimit, name: "", maxRooms: configuration.maxRooms).answer
        }
        let rooms = self.rooms
        let logger = self.logger
        let eventLoop = stream.eventLoop
        return .stream(
            EventStream(route: "chat-events", room: roomName, headers: request.headers, tracer: host.activeTracer) { writer -> EventStream.Stop in
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
