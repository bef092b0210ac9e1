public import Foundation

/// Constants and coding helpers of the Duplex chat protocol.
///
/// Every frame is a JSON text message with a `type` discriminator and the protocol version `v`.
/// See `docs/protocol.md` for the full description with an example of every frame.
public enum ChatProtocol {
    /// The protocol version this library speaks. Frames carry it as `"v"`.
    public static let version = 1

    /// The WebSocket subprotocol that names this protocol. A client may offer it in
    /// `Sec-WebSocket-Protocol`; the server then answers with it. A client that offers none
    /// is served the same protocol.
    public static let subprotocol = "duplex.chat.v1"

    /// The close code a member's older connection gets when a newer one presents the same
    /// resume token: the member is now served on the newer connection.
    public static let replacedCloseCode = WebSocketCloseCode(4001)

    /// Makes the JSON encoder used for chat frames: sorted keys, ISO-8601 dates with milliseconds.
    public static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(ChatTimestamp.format(date))
        }
        return encoder
    }

    /// Makes the JSON decoder used for chat frames. It accepts ISO-8601 dates with or without
    /// fractional seconds.
    public static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = ChatTimestamp.parse(text) else {
                throw DecodingError.dataCorruptedError(
                    in: container,
                    debugDescription: "expected an ISO-8601 date, got \(text.debugDescription)"
                )
            }
            return date
        }
        return decoder
    }
}

/// ISO-8601 timestamps as the chat protocol and the SSE tick stream write them.
public enum ChatTimestamp {
    /// Formats a date as ISO-8601 in UTC with milliseconds, for example `2026-11-22T02:50:00.123Z`.
    /// The date is rounded to the nearest millisecond.
    public static func format(_ date: Date) -> String {
        let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded())
        let (seconds, fraction) = milliseconds.quotientAndRemainder(dividingBy: 1000)
        let whole = seconds - (fraction < 0 ? 1 : 0)
        let millis = fraction < 0 ? fraction + 1000 : fraction
        let text = Date(timeIntervalSince1970: Double(whole)).formatted(.iso8601)  // 2026-11-22T02:50:00Z
        let digits = String(millis)
        return text.dropLast() + "." + String(repeating: "0", count: 3 - digits.count) + digits + "Z"
    }

    /// Parses an ISO-8601 date with or without fractional seconds.
    public static func parse(_ text: String) -> Date? {
        if let date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text) {
            return date
        }
        return try? Date.ISO8601FormatStyle().parse(text)
    }
}
