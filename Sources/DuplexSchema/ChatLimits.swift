/// The allowed characters and lengths of chat rooms, names, client message ids and texts.
///
/// - Room: 1 to 64 characters from `A-Z a-z 0-9 . _ -`.
/// - Name: 1 to 32 characters and at most 128 bytes of UTF-8: letters and digits of any script,
///   `.`, `_`, `-`, and spaces that are neither leading nor trailing. (The byte limit stops a name
///   of one letter and thousands of combining marks, which counts as one character.)
/// - Client message id: 1 to 64 printable ASCII characters (`!` to `~`).
/// - Text: at least one non-whitespace character, at most ``maxTextBytes`` bytes of UTF-8.
public struct ChatLimits: Sendable, Hashable {
    /// The longest room name, in characters.
    public var maxRoomLength: Int
    /// The longest member name, in characters (grapheme clusters).
    public var maxNameLength: Int
    /// The longest member name, in bytes of UTF-8.
    public var maxNameBytes: Int
    /// The longest client message id, in characters.
    public var maxMessageIDLength: Int
    /// The longest message text, in bytes of UTF-8.
    public var maxTextBytes: Int

    /// Creates limits; every argument has the protocol's default.
    public init(maxRoomLength: Int = 64, maxNameLength: Int = 32, maxMessageIDLength: Int = 64, maxTextBytes: Int = 4096, maxNameBytes: Int = 128) {
        self.maxRoomLength = maxRoomLength
        self.maxNameLength = maxNameLength
        self.maxNameBytes = maxNameBytes
        self.maxMessageIDLength = maxMessageIDLength
        self.maxTextBytes = maxTextBytes
    }

    /// Checks a room name.
    /// - Throws: ``ChatProtocolError`` with code ``ChatErrorCode/invalidRoom``.
    public func validate(room: String) throws(ChatProtocolError) {
        let scalars = room.unicodeScalars
        guard !scalars.isEmpty, scalars.count <= maxRoomLength else {
            throw ChatProtocolError(.invalidRoom, "room must be 1 to \(maxRoomLength) characters long")
        }
        for scalar in scalars where !(scalar.isASCII && (Self.isAlphanumericASCII(scalar) || "._-".unicodeScalars.contains(scalar))) {
            throw ChatProtocolError(.invalidRoom, "room may contain only A-Z a-z 0-9 . _ - (found \(scalar.escaped(asASCII: true)))")
        }
    }

    /// Checks a member name.
    /// - Throws: ``ChatProtocolError`` with code ``ChatErrorCode/invalidName``.
    public func validate(name: String) throws(ChatProtocolError) {
        // Bytes first: counting characters of a hostile name costs time in proportion to its size.
        guard name.utf8.count <= maxNameBytes else {
            throw ChatProtocolError(.invalidName, "name must be at most \(maxNameBytes) bytes of UTF-8")
        }
        let scalars = Array(name.unicodeScalars)
        guard !scalars.isEmpty, name.count <= maxNameLength else {
            throw ChatProtocolError(.invalidName, "name must be 1 to \(maxNameLength) characters long")
        }
        guard scalars.first != " ", scalars.last != " " else {
            throw ChatProtocolError(.invalidName, "name must not start or end with a space")
        }
        for scalar in scalars {
            let props = scalar.properties
            let allowed =
                props.isAlphabetic || props.numericType != nil || props.generalCategory == .nonspacingMark
                || props.generalCategory == .spacingMark || "._- ".unicodeScalars.contains(scalar)
            guard allowed, props.generalCategory != .control else {
                throw ChatProtocolError(
                    .invalidName, "name may contain only letters, digits, spaces and . _ - (found \(scalar.escaped(asASCII: true)))")
            }
        }
    }

    /// Checks a client message id.
    /// - Throws: ``ChatProtocolError`` with code ``ChatErrorCode/invalidMessageID``.
    public func validate(messageID: String) throws(ChatProtocolError) {
        let scalars = messageID.unicodeScalars
        guard !scalars.isEmpty, scalars.count <= maxMessageIDLength else {
            throw ChatProtocolError(.invalidMessageID, "clientMessageId must be 1 to \(maxMessageIDLength) characters long")
        }
        guard scalars.allSatisfy({ (0x21...0x7E).contains($0.value) }) else {
            throw ChatProtocolError(.invalidMessageID, "clientMessageId may contain only printable ASCII without spaces")
        }
    }

    /// Checks a resume token presented as `token=`: 16 to 64 characters of `A-Z a-z 0-9 - _`.
    /// - Throws: ``ChatProtocolError`` with code ``ChatErrorCode/invalidToken``.
    public func validate(token: String) throws(ChatProtocolError) {
        let bytes = token.utf8
        guard (16...64).contains(bytes.count), bytes.allSatisfy({ Self.isTokenByte($0) }) else {
            throw ChatProtocolError(.invalidToken, "token must be 16 to 64 characters of A-Z a-z 0-9 - _, as welcome's resumeToken")
        }
    }

    /// Checks an epoch presented as `epoch=`: 1 to 64 characters of `A-Z a-z 0-9 - _`.
    /// - Throws: ``ChatProtocolError`` with code ``ChatErrorCode/invalidEpoch``.
    public func validate(epoch: String) throws(ChatProtocolError) {
        let bytes = epoch.utf8
        guard (1...64).contains(bytes.count), bytes.allSatisfy({ Self.isTokenByte($0) }) else {
            throw ChatProtocolError(.invalidEpoch, "epoch must be 1 to 64 characters of A-Z a-z 0-9 - _, as welcome's epoch")
        }
    }

    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A, 0x2D, 0x5F: true
        default: false
        }
    }

    /// Checks a message text.
    /// - Throws: ``ChatProtocolError`` with code ``ChatErrorCode/emptyText`` or ``ChatErrorCode/textTooLong``.
    public func validate(text: String) throws(ChatProtocolError) {
        guard text.unicodeScalars.contains(where: { !$0.properties.isWhitespace }) else {
            throw ChatProtocolError(.emptyText, "text must contain at least one non-whitespace character")
        }
        guard text.utf8.count <= maxTextBytes else {
            throw ChatProtocolError(.textTooLong, "text is \(text.utf8.count) bytes; the limit is \(maxTextBytes)")
        }
    }

    private static func isAlphanumericASCII(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x30...0x39, 0x41...0x5A, 0x61...0x7A: true
        default: false
        }
    }
}
