import DuplexSchema
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOConcurrencyHelpers
import NIOCore

/// A validated request to join a chat room.
struct ChatJoin: Sendable {
    var room: ChatRoom
    var name: String
    var since: Int?
}

extension DuplexServer {
    /// Validates `room`, `name` and `since` of a chat request, and finds or creates the room.
    func chatJoin(_ request: Request, _ context: DuplexRequestContext) -> Result<ChatJoin, Refusal> {
        let limits = configuration.chatLimits
        do throws(ChatProtocolError) {
            let roomName = context.parameters.get("room") ?? ""
            try limits.validate(room: roomName)
            guard let name = request.uri.queryParameters.get("name") else {
                throw ChatProtocolError(.invalidName, "the query parameter name is required, as in ?name=alice")
            }
            try limits.validate(name: name)
            var since: Int?
            if let text = request.uri.queryParameters.get("since") {
                guard let value = Int(text), value >= 0 else {
                    throw ChatProtocolError(.invalidSince, "since must be a non-negative integer seq (got \(text.debugDescription))")
                }
                since = value
            }
            guard let room = rooms.room(named: roomName) else {
                return .failure(Refusal(status: .serviceUnavailable, error: ChatProtocolError(.invalidRoom, "the server holds its maximum of \(configuration.maxRooms) rooms")))
            }
            return .success(ChatJoin(room: room, name: name, since: since))
        } catch {
            return .failure(Refusal(status: .badRequest, error: error))
        }
    }

    /// `WS /chat/{room}`: a member of a room.
    ///
    /// Sends `welcome`, then the events after `since`, then live events; answers each `say` with
    /// an `ack` (after the message itself) or an `error`, and keeps the connection open after
    /// errors. A member more than `outboundQueueLimit` frames behind is closed with 1013 so that
    /// it reconnects with `since`.
    func serveChat(_ join: ChatJoin, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, channel: any Channel) async throws {
        let session = UUID().uuidString.lowercased()
        let (frames, sink) = AsyncStream<String>.makeStream(bufferingPolicy: .bufferingOldest(configuration.outboundQueueLimit))
        let overflowed = NIOLockedValueBox(false)
        let subscriber = RoomSubscriber(
            member: (join.name, session),
            deliver: { event in
                if case .enqueued = sink.yield(event.json) { return true }
                return false
            },
            onOverflow: {
                overflowed.withLockedValue { $0 = true }
                sink.finish()
            }
        )
        try await connections.withConnection(.init(kind: .webSocket, route: "chat", room: join.room.name)) { commands in
            let subscription = join.room.subscribe(subscriber, since: join.since)
            defer { join.room.unsubscribe(subscription.id) }
            let welcome = ChatServerFrame.welcome(
                ChatWelcome(
                    session: session,
                    room: join.room.name,
                    name: join.name,
                    members: subscription.members,
                    latestSeq: subscription.latestSeq,
                    oldestSeq: subscription.oldestSeq
                )
            )
            try await outbound.write(.text(try welcome.jsonString()))
            for event in subscription.backlog {
                try await outbound.write(.text(event.json))
            }
            let gate = StallGate()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await frame in frames {
                        await gate.wait()
                        try await outbound.write(.text(frame))
                    }
                    if overflowed.withLockedValue({ $0 }) {
                        try await self.close(outbound: outbound, channel: channel, code: .tryAgainLater, reason: "too far behind: reconnect with since")
                    }
                }
                group.addTask {
                    try await self.obey(commands, outbound: outbound, channel: channel, gate: gate)
                }
                for try await message in inbound.messages(maxSize: configuration.maxMessageBytes) {
                    let reply = self.reply(to: message, in: join)
                    if let reply, case .dropped = sink.yield(reply) {
                        overflowed.withLockedValue { $0 = true }
                        sink.finish()
                    }
                }
                sink.finish()
                group.cancelAll()
            }
        }
    }

    /// The `ack` or `error` frame answering one message from a member.
    private func reply(to message: WebSocketMessage, in join: ChatJoin) -> String? {
        let frame: ChatServerFrame
        switch message {
        case .binary:
            frame = .error(ChatErrorFrame(code: .binaryNotSupported, reason: "chat frames are JSON text messages"))
        case .text(let text):
            frame = Self.answer(text: text, from: join.name, in: join.room, limits: configuration.chatLimits)
        }
        return try? frame.jsonString()
    }

    static func answer(text: String, from name: String, in room: ChatRoom, limits: ChatLimits) -> ChatServerFrame {
        let frame: ChatClientFrame
        do {
            frame = try ChatClientFrame.decode(Data(text.utf8))
        } catch {
            return .error(ChatErrorFrame(error))
        }
        switch frame {
        case .say(let say):
            do throws(ChatProtocolError) {
                try limits.validate(messageID: say.clientMessageID)
                try limits.validate(text: say.text)
            } catch {
                return .error(ChatErrorFrame(error, clientMessageID: say.clientMessageID))
            }
            do {
                switch try room.say(say, from: name) {
                case .accepted(let seq): return .ack(ChatAck(clientMessageID: say.clientMessageID, seq: seq))
                case .duplicate(let seq): return .ack(ChatAck(clientMessageID: say.clientMessageID, seq: seq, duplicate: true))
                }
            } catch {
                return .error(ChatErrorFrame(code: .invalidFrame, reason: "the message could not be encoded", clientMessageID: say.clientMessageID))
            }
        }
    }
}
