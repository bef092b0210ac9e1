/// A machine-readable chat error code, sent in an `error` frame and in 400 responses.
///
/// An open set: compare with the static members, and expect codes this version does not know.
public struct ChatErrorCode: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible {
    public var rawValue: String

    public init(rawValue: String) {
        self.rawValue = rawValue
    }

    public init(_ rawValue: String) {
        self.rawValue = rawValue
    }

    /// The frame is not valid JSON, or not a JSON object.
    public static let badJSON = ChatErrorCode("bad_json")
    /// The frame's `type` is missing or not one this server knows.
    public static let unknownType = ChatErrorCode("unknown_type")
    /// The frame's `v` is not a protocol version this server speaks.
    public static let unsupportedVersion = ChatErrorCode("unsupported_version")
    /// The frame has the right type but a field is missing or has the wrong type.
    public static let invalidFrame = ChatErrorCode("invalid_frame")
    /// A binary message was sent where the protocol expects JSON text.
    public static let binaryNotSupported = ChatErrorCode("binary_not_supported")
    /// The text is empty or only whitespace.
    public static let emptyText = ChatErrorCode("empty_text")
    /// The text is longer than the server allows.
    public static let textTooLong = ChatErrorCode("text_too_long")
    /// The client message id is empty, too long, or has characters outside printable ASCII.
    public static let invalidMessageID = ChatErrorCode("invalid_message_id")
    /// The room name is not allowed.
    public static let invalidRoom = ChatErrorCode("invalid_room")
    /// The member name is not allowed.
    public static let invalidName = ChatErrorCode("invalid_name")
    /// The `since` query parameter is not a non-negative integer.
    public static let invalidSince = ChatErrorCode("invalid_since")
    /// The `token` query parameter is not a resume token (16 to 64 of `A-Z a-z 0-9 - _`).
    public static let invalidToken = ChatErrorCode("invalid_token")
    /// The `epoch` query parameter is not an epoch (1 to 64 of `A-Z a-z 0-9 - _`).
    public static let invalidEpoch = ChatErrorCode("invalid_epoch")
    /// A member of that name is present in the room, and the join did not present its resume token.
    public static let nameTaken = ChatErrorCode("name_taken")
    /// The server holds its maximum of rooms and none is empty enough to evict.
    public static let roomLimit = ChatErrorCode("room_limit")
    /// The server's room store (PostgreSQL, when several servers share rooms) cannot be reached
    /// or did not answer in time: nothing was recorded; try again (a rejoin resends what was
    /// not acknowledged).
    public static let storeUnavailable = ChatErrorCode("store_unavailable")

    public var description: String { rawValue }

    public init(from decoder: any Decoder) throws {
        self.rawValue = try decoder.singleValueContainer().decode(String.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}

/// A violation of the chat protocol: a code plus a human-readable reason.
public struct ChatProtocolError: Error, Hashable, Sendable, CustomStringConvertible {
    /// What went wrong, for programs.
    public var code: ChatErrorCode
    /// What went wrong, for people.
    public var reason: String

    public init(_ code: ChatErrorCode, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { "\(code): \(reason)" }
}
