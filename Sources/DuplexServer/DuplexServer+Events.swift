import DuplexSchema
import Foundation
import HTTPTypes
import Hummingbird
import Logging

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
                    error: ChatProtocolError(.init("invalid_interval"), "interval must be an integer number of milliseconds from \(minimum) to 86400000 (got \(text.debugDescription))")
                ).response
            }
            interval = value
        }
        let lastEventID = request.headers[HTTPField.Name("Last-Event-ID")!]
        let first = ticks.firstTick(after: lastEventID, intervalMilliseconds: interval, window: Int64(configuration.historyLimit))
        let ticks = self.ticks
        let period = interval
        return EventStreamResponse(server: self).response(info: .init(kind: .eventStream, route: "events"), channel: context.channel) { sink in
            var n = first
            while true {
                try await Task.sleep(until: ticks.instant(ofTick: n, intervalMilliseconds: period), clock: .continuous)
                let text = (try? TickClock.event(tick: n, intervalMilliseconds: period).encoded()) ?? ""
                guard EventStreamResponse.yield(text, to: sink) else { return }
                n += 1
            }
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
            return refusal(.roomLimit, name: "").response
        }
        let rooms = self.rooms
        return EventStreamResponse(server: self).response(info: .init(kind: .eventStream, route: "chat-events", room: roomName), channel: context.channel) { sink in
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
                    self.logger.warning("a room stream ended at once: the room store is unavailable", metadata: ["room": "\(roomName)", "error": "\(why)"])
                }
                return
            }
            defer { room.unsubscribe(subscription.id) }
            await waitUntilCancelled()
        }
    }
}
