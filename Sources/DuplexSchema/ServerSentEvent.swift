/// One Server-Sent Event: what a client receives, and what a server encodes.
///
/// A parsed event follows the WHATWG model: ``id`` is the stream's last event id at the time the
/// event was dispatched (it carries over from earlier events until the server sends a new `id:`),
/// and ``event`` is `"message"` when the server sent no `event:` field.
///
/// ```swift
/// let tick = ServerSentEvent(id: "7", event: "tick", data: #"{"n":7}"#)
/// let wire = try tick.encoded()   // "id: 7\nevent: tick\ndata: {\"n\":7}\n\n"
/// ```
public struct ServerSentEvent: Sendable, Hashable, Codable {
    /// The event id (`id:`), or for a parsed event the last event id when it was dispatched.
    public var id: String?
    /// The event type (`event:`); nil encodes no field, which clients read as `"message"`.
    public var event: String?
    /// The payload (`data:` lines joined by LF).
    public var data: String
    /// The reconnection time in milliseconds (`retry:`) that came with this event, if any.
    public var retry: Int?

    /// Creates an event.
    public init(id: String? = nil, event: String? = nil, data: String, retry: Int? = nil) {
        self.id = id
        self.event = event
        self.data = data
        self.retry = retry
    }

    /// Encodes the event in the `text/event-stream` format, ending with the blank line that
    /// dispatches it. Multi-line data becomes several `data:` lines (CRLF, CR and LF all split).
    /// - Throws: ``ServerSentEventError`` when the id contains CR, LF or NUL, the event name
    ///   contains CR, LF or NUL, or the retry is negative.
    public func encoded() throws(ServerSentEventError) -> String {
        var output = ""
        if let id {
            guard !id.utf8.contains(where: { $0 == 0x0A || $0 == 0x0D || $0 == 0x00 }) else {
                throw ServerSentEventError(.invalidID, "an event id must not contain CR, LF or NUL")
            }
            output += id.isEmpty ? "id\n" : "id: \(id)\n"
        }
        if let event {
            guard !event.utf8.contains(where: { $0 == 0x0A || $0 == 0x0D || $0 == 0x00 }) else {
                throw ServerSentEventError(.invalidEventName, "an event name must not contain CR, LF or NUL")
            }
            output += "event: \(event)\n"
        }
        if let retry {
            guard retry >= 0 else {
                throw ServerSentEventError(.invalidRetry, "retry must not be negative (got \(retry))")
            }
            output += "retry: \(retry)\n"
        }
        for line in Self.lines(of: data) {
            output += line.isEmpty ? "data\n" : "data: \(line)\n"
        }
        output += "\n"
        return output
    }

    /// A comment line block (`: text`), which clients ignore: used as a heartbeat.
    /// Each line of `text` becomes its own comment line.
    public static func comment(_ text: String = "") -> String {
        Self.lines(of: text).map { $0.isEmpty ? ":\n" : ": \($0)\n" }.joined()
    }

    /// A block that sets only the client's reconnection time, in milliseconds.
    /// - Precondition: `milliseconds` is not negative.
    public static func retryDirective(milliseconds: Int) -> String {
        precondition(milliseconds >= 0, "retry must not be negative")
        return "retry: \(milliseconds)\n\n"
    }

    /// Splits text on CRLF, CR and LF. It works on the UTF-8 bytes, where CR and LF never occur
    /// inside another character's encoding, so no line break is merged with a following
    /// combining mark (as splitting on `Character`s would) and the scan costs one pass over
    /// the bytes.
    static func lines(of text: String) -> [Substring] {
        let bytes = text.utf8
        guard bytes.contains(where: { $0 == 0x0A || $0 == 0x0D }) else { return [text[...]] }
        var lines: [Substring] = []
        var start = bytes.startIndex
        var index = start
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == 0x0A || byte == 0x0D {
                lines.append(text[start..<index])
                var next = bytes.index(after: index)
                if byte == 0x0D, next < bytes.endIndex, bytes[next] == 0x0A {
                    next = bytes.index(after: next)
                }
                index = next
                start = next
            } else {
                index = bytes.index(after: index)
            }
        }
        lines.append(text[start..<bytes.endIndex])
        return lines
    }
}

/// An event that cannot be encoded, or a stream that cannot be parsed.
public struct ServerSentEventError: Error, Hashable, Sendable, CustomStringConvertible {
    /// The kind of problem.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String, Hashable, Sendable {
            case invalidID, invalidEventName, invalidRetry, eventTooLarge
        }

        private let value: Value
        private init(_ value: Value) { self.value = value }

        /// An id containing CR, LF or NUL.
        public static let invalidID = Code(.invalidID)
        /// An event name containing CR, LF or NUL.
        public static let invalidEventName = Code(.invalidEventName)
        /// A negative retry.
        public static let invalidRetry = Code(.invalidRetry)
        /// A line or an event larger than the parser's limit.
        public static let eventTooLarge = Code(.eventTooLarge)

        public var description: String { value.rawValue }
    }

    /// The kind of problem.
    public var code: Code
    /// A readable explanation.
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "ServerSentEventError.\(code): \(message)" }
}
