package import DuplexHost
package import DuplexSchema
package import Foundation
package import NIOCore

/// One room event as the server keeps and sends it: encoded once, as a WebSocket frame and, when
/// the room has SSE observers, as an SSE event, and shared by every subscriber.
package struct RoomEvent: Sendable {
    /// The event's place in the room sequence.
    package var seq: Int
    /// "message", "joined" or "left": the frame type and the SSE event name.
    package var type: String
    /// The frame as JSON text.
    package var json: String
    /// The room's epoch when the event was numbered: its SSE id is `EPOCH:SEQ`.
    package var epoch: String
    /// For a message: the keys that make a repeated `say` idempotent (by token, and by name).
    package var dedupeKeys: [String]
    /// For a `left` event sequenced by a shared store: whose connection ended, and why. A room
    /// that applies it closes that connection if it is still here (see ``ChatRoom/apply(_:)``).
    package var departure: Departure?
    /// The WebSocket text frame carrying ``json`` (``ServerTextFrame``), encoded once for the
    /// live fan-out and shared by every member; nil in history, which keeps no second copy.
    package var frame: ByteBuffer?
    /// Its compressed frame, made once for the members that negotiated permessage-deflate; nil
    /// in history.
    package var deflated: DeflatedFrameCache?
    /// The event as SSE text (``sseText``), made once for the live fan-out when the room has SSE
    /// observers and shared by them; nil in history, and where no one observes.
    package var sse: ByteBuffer?

    /// Why a member left, as a shared store records it.
    package struct Departure: Sendable, Equatable {
        /// The connection's session id.
        package var session: String
        /// Whether a newer connection of the same member took its place (else it expired or left).
        package var replaced: Bool

        package init(session: String, replaced: Bool) {
            self.session = session
            self.replaced = replaced
        }
    }

    package init(seq: Int, type: String, json: String, epoch: String, dedupeKeys: [String] = [], departure: Departure? = nil) {
        self.seq = seq
        self.type = type
        self.json = json
        self.epoch = epoch
        self.dedupeKeys = dedupeKeys
        self.departure = departure
    }

    /// What the event costs to keep: its JSON (the SSE text is made only for the live fan-out
    /// to observers, or for a backlog).
    package var bytes: Int { json.utf8.count }

    /// The event as SSE text (`id: EPOCH:SEQ`, `event`, `data`), for room streams: the shared
    /// bytes of the live fan-out, or made now (a backlog).
    package var sseText: ByteBuffer {
        sse
            ?? ByteBuffer(
                string: (try? ServerSentEvent(id: RoomStreamID(epoch: epoch, seq: seq).description, event: type, data: json).encoded()) ?? "")
    }
}

extension RoomEvent {
    /// What makes a repeated `say` idempotent, the same for every store: the member's resume
    /// token with the message's client id, and, for a client that predates tokens, its name with
    /// that id.
    package struct DedupeKeys: Sendable {
        package let byToken: String
        package let byName: String

        package init(_ say: ChatSay, from name: String, token: String) {
            byToken = "t\n\(token)\n\(say.clientMessageID)"
            byName = "n\n\(name)\n\(say.clientMessageID)"
        }

        /// Both, as an event keeps them.
        package var all: [String] { [byToken, byName] }
    }

    /// The frame of a `message` event, the same for every store: `say` by `name` in `room`, at
    /// `seq`, sent at `date`.
    package static func messageFrame(room: String, seq: Int, _ say: ChatSay, from name: String, at date: Date) -> ChatServerFrame {
        .message(ChatMessage(room: room, seq: seq, clientMessageID: say.clientMessageID, from: name, text: say.text, sentAt: date))
    }
}
