import DuplexSchema
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// A validated request to join a chat room.
struct ChatJoin: Sendable {
    var room: String
    var name: String
    var since: Int?
    /// The resume token the member presented, if any.
    var token: String?
    /// The epoch `since` counts in, if the member gave one.
    var epoch: String?
}

extension DuplexServer {
    /// Validates `room`, `name`, `since` and `token` of a chat request. It creates no room:
    /// rooms are created by the members and watchers who join them.
    func chatJoin(_ request: Request, _ context: DuplexRequestContext) -> Result<ChatJoin, Refusal> {
        chatJoin(request, room: context.parameters.get("room") ?? "")
    }

    /// ``chatJoin(_:_:)`` for the room named `roomName`.
    func chatJoin(_ request: Request, room roomName: String) -> Result<ChatJoin, Refusal> {
        let limits = configuration.chatLimits
        do throws(ChatProtocolError) {
            try limits.validate(room: roomName)
            guard let name = request.uri.queryParameters.get("name") else {
                throw ChatProtocolError(.invalidName, "the query parameter name is required, as in ?name=alice")
            }
            try limits.validate(name: name)
            var since: Int?
            if let text = request.uri.queryParameters.get("since") {
                guard let value = Int(text), value >= 0 else {
                    throw ChatProtocolError(.invalidSince, "since must be a non-negative integer seq (got \(text.prefix(32).debugDescription))")
                }
                since = value
            }
            let token = request.uri.queryParameters.get("token").map { String($0) }
            if let token { try limits.validate(token: token) }
            let epoch = request.uri.queryParameters.get("epoch").map { String($0) }
            if let epoch { try limits.validate(epoch: epoch) }
            return .success(ChatJoin(room: roomName, name: name, since: since, token: token, epoch: epoch))
        } catch {
            return .failure(Refusal(status: .badRequest, error: error))
        }
    }

    /// The refusal for a room that could not be joined.
    func refusal(_ reason: ChatStoreRefusal, name: String) -> Refusal {
        switch reason {
        case .roomLimit:
            Refusal(
                status: .serviceUnavailable,
                error: ChatProtocolError(.roomLimit, "the server holds its maximum of \(configuration.maxRooms) rooms, none of them empty"))
        case .nameTaken:
            Refusal(
                status: .conflict,
                error: ChatProtocolError(.nameTaken, "\(name) is already in the room; rejoin with its resumeToken as token=, or pick another name"))
        case .unavailable(let why):
            Refusal(status: .serviceUnavailable, error: ChatProtocolError(.storeUnavailable, "the room store is unavailable: \(why)"))
        }
    }

    /// A fresh resume token: 144 random bits, base64url.
    static func makeResumeToken() -> String {
        randomBase64URL(bytes: 18)
    }

    /// What a member gets first: the welcome, then the backlog its `since` asked for.
    static func firstFrames(_ join: ChatJoin, session: String, token: String, room: ChatRoom, subscription: ChatRoom.Subscription) throws -> [String]
    {
        let welcome = ChatServerFrame.welcome(
            ChatWelcome(
                session: session,
                room: join.room,
                name: join.name,
                members: subscription.members,
                latestSeq: subscription.latestSeq,
                oldestSeq: subscription.oldestSeq,
                resumeToken: token,
                epoch: room.epoch,
                recovered: subscription.recovered
            )
        )
        return try [welcome.jsonString()] + subscription.backlog.map(\.json)
    }

    /// A frame that is not a valid `say`, as the error frame that answers it.
    struct SayRefusal: Error {
        var frame: ChatServerFrame
    }

    /// The `say` a member's text frame holds, within the limits; or the error frame answering it.
    static func parseSay(text: String, limits: ChatLimits) -> Result<ChatSay, SayRefusal> {
        let frame: ChatClientFrame
        do {
            frame = try ChatClientFrame.decode(Data(text.utf8))
        } catch {
            return .failure(SayRefusal(frame: .error(ChatErrorFrame(error))))
        }
        switch frame {
        case .say(let say):
            do throws(ChatProtocolError) {
                try limits.validate(messageID: say.clientMessageID)
                try limits.validate(text: say.text)
            } catch {
                return .failure(SayRefusal(frame: .error(ChatErrorFrame(error, clientMessageID: say.clientMessageID))))
            }
            return .success(say)
        }
    }

    /// The `ack` for a recorded `say`.
    static func ack(_ say: ChatSay, _ result: ChatRoom.SayResult) -> ChatServerFrame {
        switch result {
        case .accepted(let seq): .ack(ChatAck(clientMessageID: say.clientMessageID, seq: seq))
        case .duplicate(let seq): .ack(ChatAck(clientMessageID: say.clientMessageID, seq: seq, duplicate: true))
        }
    }
}

extension ChannelTextWriter {
    /// Accepts room events, in order, to go out together: each one's shared frame (and shared
    /// compressed frame) when it has them; false when the member is too far behind or finished.
    /// Messages are written at once on the writer's loop; presence alone waits for the loop's
    /// batch (see ``offer(frame:textBytes:deflated:batched:)``).
    func offer(_ events: [RoomEvent]) -> Bool {
        let frames = events.lazy.map { event in
            (frame: event.frame ?? ServerTextFrame.encode(event.json), textBytes: event.json.utf8.count, deflated: event.deflated)
        }
        return offer(frames, batched: !events.contains { $0.type == "message" })
    }
}
