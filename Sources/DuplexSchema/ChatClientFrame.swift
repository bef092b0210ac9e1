public import Foundation

/// A frame a chat client sends to the server.
///
/// ```swift
/// let frame = ChatClientFrame.say(ChatSay(clientMessageID: "c-1", text: "hello"))
/// let json = try frame.jsonString()  // {"clientMessageId":"c-1","text":"hello","type":"say","v":1}
/// ```
public enum ChatClientFrame: Sendable, Hashable, Codable {
    /// Post a message to the room.
    case say(ChatSay)

    /// The frame's `type` value.
    public var type: String {
        switch self {
        case .say: "say"
        }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: ChatFrameKeys.self)
        try ChatFrameKeys.checkVersion(in: container)
        let type = try container.decode(String.self, forKey: .type)
        switch type {
        case "say": self = .say(try ChatSay(from: decoder))
        default:
            throw DecodingError.dataCorruptedError(forKey: .type, in: container, debugDescription: "unknown frame type \(type.debugDescription)")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: ChatFrameKeys.self)
        try container.encode(ChatProtocol.version, forKey: .v)
        try container.encode(type, forKey: .type)
        switch self {
        case .say(let say): try say.encode(to: encoder)
        }
    }

    /// Encodes the frame as the JSON text sent on the wire.
    public func jsonString() throws -> String {
        String(decoding: try ChatProtocol.makeEncoder().encode(self), as: UTF8.self)
    }

    /// Decodes a frame a client sent, reporting precisely what is wrong with a bad one.
    ///
    /// A missing `v` is read as the current version.
    /// - Throws: ``ChatProtocolError`` with code ``ChatErrorCode/badJSON``, ``ChatErrorCode/unknownType``,
    ///   ``ChatErrorCode/unsupportedVersion`` or ``ChatErrorCode/invalidFrame``.
    public static func decode(_ data: Data) throws(ChatProtocolError) -> ChatClientFrame {
        let type = try ChatFrameKeys.peekType(data, known: ["say"])
        do {
            return try ChatProtocol.makeDecoder().decode(ChatClientFrame.self, from: data)
        } catch {
            throw ChatProtocolError(.invalidFrame, "\(type) frame: \(ChatFrameKeys.describe(error))")
        }
    }
}

/// The body of a `say` frame: a message to post, with a client-generated id for safe retries.
public struct ChatSay: Sendable, Hashable, Codable {
    /// The client's id for this message. Resending the same id gets the original `ack` and no
    /// second broadcast.
    public var clientMessageID: String
    /// The message text.
    public var text: String

    public init(clientMessageID: String, text: String) {
        self.clientMessageID = clientMessageID
        self.text = text
    }

    enum CodingKeys: String, CodingKey {
        case clientMessageID = "clientMessageId"
        case text
    }
}

/// The keys every frame shares, and helpers to read them from an untrusted frame.
enum ChatFrameKeys: String, CodingKey {
    case v
    case type

    static func checkVersion(in container: KeyedDecodingContainer<ChatFrameKeys>) throws {
        let version = try container.decodeIfPresent(Int.self, forKey: .v) ?? ChatProtocol.version
        guard version == ChatProtocol.version else {
            throw DecodingError.dataCorruptedError(forKey: .v, in: container, debugDescription: "unsupported protocol version \(version)")
        }
    }

    /// Reads `type` and `v` of a frame so that errors can say which of them is wrong.
    static func peekType(_ data: Data, known: Set<String>) throws(ChatProtocolError) -> String {
        let peek: FramePeek
        do {
            peek = try JSONDecoder().decode(FramePeek.self, from: data)
        } catch DecodingError.typeMismatch {
            throw ChatProtocolError(.badJSON, "frame must be a JSON object")
        } catch {
            throw ChatProtocolError(.badJSON, "frame is not valid JSON")
        }
        if peek.hasVersion, peek.version != ChatProtocol.version {
            let shown = peek.version.map(String.init) ?? "of the wrong type"
            throw ChatProtocolError(.unsupportedVersion, "protocol version \(shown) is not supported; this server speaks \(ChatProtocol.version)")
        }
        guard let type = peek.type else {
            throw ChatProtocolError(.unknownType, "frame has no string \"type\"")
        }
        guard known.contains(type) else {
            throw ChatProtocolError(
                .unknownType, "unknown frame type \(type.debugDescription); expected one of \(known.sorted().joined(separator: ", "))")
        }
        return type
    }

    /// The two shared fields of a frame, read leniently.
    private struct FramePeek: Decodable {
        var hasVersion: Bool
        var version: Int?
        var type: String?

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: ChatFrameKeys.self)
            hasVersion = container.contains(.v)
            version = try? container.decode(Int.self, forKey: .v)
            type = try? container.decode(String.self, forKey: .type)
        }
    }

    static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, _):
            return "missing field \"\(key.stringValue)\""
        case DecodingError.typeMismatch(let type, let context), DecodingError.valueNotFound(let type, let context):
            let path = context.codingPath.map(\.stringValue).joined(separator: ".")
            return "field \"\(path)\" must be \(type)"
        case DecodingError.dataCorrupted(let context):
            return context.debugDescription
        default:
            return "\(error)"
        }
    }
}
