public import Foundation

/// A frame the chat server sends to a client.
///
/// ```swift
/// let frame = try ChatServerFrame.decode(Data(text.utf8))
/// if case .message(let message) = frame {
///     print("#\(message.seq) \(message.from): \(message.text)")
/// }
/// ```
public enum ChatServerFrame: Sendable, Hashable, Codable {
    /// Sent first on every connection.
    case welcome(ChatWelcome)
    /// A message posted to the room, sender included.
    case message(ChatMessage)
    /// A member joined the room.
    case joined(ChatPresence)
    /// A member left the room.
    case left(ChatPresence)
    /// The server accepted a `say` frame.
    case ack(ChatAck)
    /// The server rejected a frame; the connection stays open.
    case error(ChatErrorFrame)

    /// The frame's `type` value.
    public var type: String {
        switch self {
        case .welcome: "welcome"
        case .message: "message"
        case .joined: "joined"
        case .left: "left"
        case .ack: "ack"
        case .error: "error"
        }
    }

    /// The room sequence number of a room event (`message`, `joined`, `left`), else nil.
    public var seq: Int? {
        switch self {
        case .message(let message): message.seq
        case .joined(let presence), .left(let presence): presence.seq
        default: nil
        }
    }

    static let knownTypes: Set<String> = ["welcome", "message", "joined", "left", "ack", "error"]

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: ChatFrameKeys.self)
        try ChatFrameKeys.checkVersion(in: container)
        let type = try container.decode(String.self, forKey: .type)
        switch type {
        case "welcome": self = .welcome(try ChatWelcome(from: decoder))
        case "message": self = .message(try ChatMessage(from: decoder))
        case "joined": self = .joined(try ChatPresence(from: decoder))
        case "left": self = .left(try ChatPresence(from: decoder))
        case "ack": self = .ack(try ChatAck(from: decoder))
        case "error": self = .error(try ChatErrorFrame(from: decoder))
        default:
            throw DecodingError.dataCorruptedError(forKey: .type, in: container, debugDescription: "unknown frame type \(type.debugDescription)")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: ChatFrameKeys.self)
        try container.encode(ChatProtocol.version, forKey: .v)
        try container.encode(type, forKey: .type)
        switch self {
        case .welcome(let body): try body.encode(to: encoder)
        case .message(let body): try body.encode(to: encoder)
        case .joined(let body), .left(let body): try body.encode(to: encoder)
        case .ack(let body): try body.encode(to: encoder)
        case .error(let body): try body.encode(to: encoder)
        }
    }

    /// Encodes the frame as the JSON text sent on the wire.
    public func jsonString() throws -> String {
        String(decoding: try ChatProtocol.makeEncoder().encode(self), as: UTF8.self)
    }

    /// Decodes a frame the server sent.
    /// - Throws: ``ChatProtocolError`` saying what is wrong with the frame.
    public static func decode(_ data: Data) throws(ChatProtocolError) -> ChatServerFrame {
        let type = try ChatFrameKeys.peekType(data, known: knownTypes)
        do {
            return try ChatProtocol.makeDecoder().decode(ChatServerFrame.self, from: data)
        } catch {
            throw ChatProtocolError(.invalidFrame, "\(type) frame: \(ChatFrameKeys.describe(error))")
        }
    }
}

/// The body of a `welcome` frame.
public struct ChatWelcome: Sendable, Hashable, Codable {
    /// The server's id for this connection.
    public var session: String
    /// The room joined.
    public var room: String
    /// The name this connection joined as.
    public var name: String
    /// The names of the members present, this one included, sorted.
    public var members: [String]
    /// The seq of the newest room event at the time of joining (0 for a new room).
    public var latestSeq: Int
    /// The seq of the oldest room event the server still keeps, or nil when it keeps none.
    /// A `since` below `oldestSeq - 1` means events were missed.
    public var oldestSeq: Int?
    /// The member's resume token: a secret that only this member holds. Present it as
    /// `token=` when rejoining: it proves the rejoining connection is the same member (so it
    /// may take over a connection of the same name that the server still sees), and it scopes
    /// the idempotency of `say`, so no one else can claim this member's message ids.
    public var resumeToken: String?
    /// The room's epoch: an opaque string that changes whenever the room's history may have been
    /// lost (a new server process, the room evicted and created again). Seqs are only comparable
    /// within one epoch. Resume with `since=SEQ&epoch=EPOCH`.
    public var epoch: String?
    /// Whether the position the join asked to resume from was recovered: true when the events
    /// after `since` were replayed (the epoch matched, or none was given), false when the join's
    /// `epoch` is not the room's, so seqs from it mean nothing here: the events the room keeps of
    /// its new epoch are replayed from its start instead. Absent when the join gave no `since`.
    public var recovered: Bool?

    public init(
        session: String,
        room: String,
        name: String,
        members: [String],
        latestSeq: Int,
        oldestSeq: Int?,
        resumeToken: String? = nil,
        epoch: String? = nil,
        recovered: Bool? = nil
    ) {
        self.session = session
        self.room = room
        self.name = name
        self.members = members
        self.latestSeq = latestSeq
        self.oldestSeq = oldestSeq
        self.resumeToken = resumeToken
        self.epoch = epoch
        self.recovered = recovered
    }
}

/// The body of a `message` frame.
public struct ChatMessage: Sendable, Hashable, Codable {
    /// The room it was posted to.
    public var room: String
    /// Its position in the room's event sequence.
    public var seq: Int
    /// The sender's id for it, echoed from the `say` frame.
    public var clientMessageID: String
    /// The sender's name.
    public var from: String
    /// The text.
    public var text: String
    /// When the server accepted it.
    public var sentAt: Date

    public init(room: String, seq: Int, clientMessageID: String, from: String, text: String, sentAt: Date) {
        self.room = room
        self.seq = seq
        self.clientMessageID = clientMessageID
        self.from = from
        self.text = text
        self.sentAt = sentAt
    }

    enum CodingKeys: String, CodingKey {
        case room, seq
        case clientMessageID = "clientMessageId"
        case from, text, sentAt
    }
}

/// The body of a `joined` or `left` frame.
public struct ChatPresence: Sendable, Hashable, Codable {
    /// The room.
    public var room: String
    /// Its position in the room's event sequence.
    public var seq: Int
    /// The member's name.
    public var name: String
    /// The member's connection id, as in its `welcome`.
    public var session: String
    /// When it happened.
    public var at: Date

    public init(room: String, seq: Int, name: String, session: String, at: Date) {
        self.room = room
        self.seq = seq
        self.name = name
        self.session = session
        self.at = at
    }
}

/// The body of an `ack` frame.
public struct ChatAck: Sendable, Hashable, Codable {
    /// The client message id of the accepted `say`.
    public var clientMessageID: String
    /// The seq the message was given.
    public var seq: Int
    /// True when this `say` repeated an id already accepted: nothing was broadcast again.
    public var duplicate: Bool

    public init(clientMessageID: String, seq: Int, duplicate: Bool = false) {
        self.clientMessageID = clientMessageID
        self.seq = seq
        self.duplicate = duplicate
    }

    enum CodingKeys: String, CodingKey {
        case clientMessageID = "clientMessageId"
        case seq, duplicate
    }
}

/// The body of an `error` frame.
public struct ChatErrorFrame: Sendable, Hashable, Codable {
    /// What went wrong, for programs.
    public var code: ChatErrorCode
    /// What went wrong, for people.
    public var reason: String
    /// The client message id of the rejected `say`, when the server could read it.
    public var clientMessageID: String?

    public init(code: ChatErrorCode, reason: String, clientMessageID: String? = nil) {
        self.code = code
        self.reason = reason
        self.clientMessageID = clientMessageID
    }

    /// Creates the frame for a protocol error.
    public init(_ error: ChatProtocolError, clientMessageID: String? = nil) {
        self.init(code: error.code, reason: error.reason, clientMessageID: clientMessageID)
    }

    enum CodingKeys: String, CodingKey {
        case code, reason
        case clientMessageID = "clientMessageId"
    }
}

/// The data of the `reset` event of a room's SSE stream (`GET /chat/{room}/events`): the
/// `Last-Event-ID` came from another epoch of the room, whose history is gone, so the stream
/// goes on with what the room keeps of its new `epoch`, from its start, then live.
public struct ChatHistoryReset: Sendable, Hashable, Codable {
    /// The frame type, `reset`.
    public var type = "reset"
    /// The protocol version.
    public var v = ChatProtocol.version
    /// The room.
    public var room: String
    /// The room's epoch now.
    public var epoch: String
    /// The epoch the client resumed from.
    public var previousEpoch: String
    /// The seq of the newest event in the new epoch.
    public var latestSeq: Int

    public init(room: String, epoch: String, previousEpoch: String, latestSeq: Int) {
        self.room = room
        self.epoch = epoch
        self.previousEpoch = previousEpoch
        self.latestSeq = latestSeq
    }
}
