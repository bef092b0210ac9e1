import DuplexHost
package import DuplexSchema
import Foundation
import HTTPTypes

/// The chat protocol's frames as the server makes and reads them (docs/protocol.md): the
/// welcome and backlog a member gets first, a `say` parsed within the room's limits, its `ack`,
/// a join's refusal, and resume tokens. Values in, frames out: no server, no connection.
package enum ChatFrames {
    /// The refusal for a room that could not be joined by `name` on a server of `maxRooms` rooms.
    package static func refusal(_ reason: ChatStoreRefusal, name: String, maxRooms: Int) -> ProtocolRefusal {
        switch reason {
        case .roomLimit:
            ProtocolRefusal(
                status: .serviceUnavailable,
                error: ChatProtocolError(.roomLimit, "the server holds its maximum of \(maxRooms) rooms, none of them empty"))
        case .nameTaken:
            ProtocolRefusal(
                status: .conflict,
                error: ChatProtocolError(.nameTaken, "\(name) is already in the room; rejoin with its resumeToken as token=, or pick another name"))
        case .unavailable(let why):
            ProtocolRefusal(status: .serviceUnavailable, error: ChatProtocolError(.storeUnavailable, "the room store is unavailable: \(why)"))
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
    package struct SayRefusal: Error {
        var frame: ChatServerFrame
    }

    /// The `say` a member's text frame holds, within the limits; or the error frame answering it.
    package static func parseSay(text: String, limits: ChatLimits) -> Result<ChatSay, SayRefusal> {
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
    package static func ack(_ say: ChatSay, _ result: ChatRoom.SayResult) -> ChatServerFrame {
        switch result {
        case .accepted(let seq): .ack(ChatAck(clientMessageID: say.clientMessageID, seq: seq))
        case .duplicate(let seq): .ack(ChatAck(clientMessageID: say.clientMessageID, seq: seq, duplicate: true))
        }
    }
}
