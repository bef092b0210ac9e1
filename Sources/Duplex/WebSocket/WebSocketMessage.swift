public import Foundation

/// A WebSocket message: text or binary.
///
/// ```swift
/// try await socket.send(.string("hello"))          // or .text("hello")
/// try await socket.send(.data(Data([1, 2, 3])))     // or .binary(...)
/// try await socket.send(try .json(ChatLine(text: "hi")))
///
/// for await message in socket.messages {
///     if let line = try? message.decode(ChatLine.self) { print(line.text) }
/// }
/// ```
public enum WebSocketMessage: Sendable, Hashable {
    /// A text message.
    case string(String)
    /// A binary message.
    case data(Data)

    /// A text message (the same as ``string(_:)``).
    public static func text(_ text: String) -> WebSocketMessage { .string(text) }

    /// A binary message from optional bytes, as seed 004 writes it:
    /// `.data("text".data(using: .utf8))`. Nil gives an empty binary message.
    public static func data(_ data: Data?) -> WebSocketMessage { .data(data ?? Data()) }

    /// A binary message (the same as ``data(_:)-enum.case``).
    public static func binary(_ data: Data) -> WebSocketMessage { .data(data) }

    /// A text message holding `value` encoded as JSON.
    /// - Throws: the encoder's error.
    public static func json(_ value: some Encodable, encoder: JSONEncoder = JSONEncoder()) throws -> WebSocketMessage {
        .string(String(decoding: try encoder.encode(value), as: UTF8.self))
    }

    /// The text of a text message; nil for a binary one.
    public var text: String? {
        if case .string(let text) = self { return text }
        return nil
    }

    /// The bytes of the message: the UTF-8 of a text message, or the binary payload.
    public var data: Data {
        switch self {
        case .string(let text): Data(text.utf8)
        case .data(let data): data
        }
    }

    /// Whether this is a text message.
    public var isText: Bool { text != nil }

    /// Decodes the message's bytes (text or binary) as JSON.
    /// - Throws: the decoder's error when the bytes are not a valid `T`.
    public func decode<T: Decodable>(_ type: T.Type = T.self, decoder: JSONDecoder = JSONDecoder()) throws -> T {
        try decoder.decode(type, from: data)
    }
}

extension WebSocketMessage {
    /// The payload's size in bytes, without copying it.
    var byteCount: Int {
        switch self {
        case .string(let text): text.utf8.count
        case .data(let data): data.count
        }
    }
}
