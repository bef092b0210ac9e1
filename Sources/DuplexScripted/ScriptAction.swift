import DuplexHost
import DuplexSchema
public import Foundation

/// One step a scripted WebSocket takes: on connect, or when a message matches a rule. A script
/// file writes each as an object (`{"send": "…"}`, `{"delayMs": 50}`, `{"close": 4001}`;
/// `docs/scripts.md`).
public enum ScriptAction: Sendable, Equatable, CustomStringConvertible {
    /// Sends a text message.
    case send(String)
    /// Sends a binary message.
    case sendBinary(Data)
    /// Waits before the actions after it.
    case delay(Duration)
    /// Starts the close handshake with `code` and `reason`.
    case close(code: UInt16, reason: String)
    /// Closes TCP at once, with no close frame.
    case drop
    /// Sends a ping with `payload`.
    case ping(String)
    /// From now on answers the client's pings (true) or withholds the pongs (false).
    case answerPings(Bool)
    /// Sends a text message cut into `frames` frames (a first frame and continuations).
    case fragment(String, frames: Int)
    /// Sends a frame the client must reject (``FrameFault``).
    case fault(FrameFault)

    /// Sends `value` encoded as JSON, as a text message.
    public static func sendJSON(_ value: some Encodable, encoder: JSONEncoder = JSONEncoder()) throws -> ScriptAction {
        .send(String(decoding: try encoder.encode(value), as: UTF8.self))
    }

    public var description: String {
        switch self {
        case .send(let text): "send \(ScriptJournal.excerpt(text).debugDescription)"
        case .sendBinary(let data): "send \(data.count) bytes"
        case .delay(let duration): "wait \(duration)"
        case .close(let code, let reason): "close \(code)" + (reason.isEmpty ? "" : " \(reason.debugDescription)")
        case .drop: "drop the connection"
        case .ping(let payload): "ping \(payload.debugDescription)"
        case .answerPings(let answers): answers ? "answer pings" : "withhold pongs"
        case .fragment(let text, let frames): "send \(ScriptJournal.excerpt(text).debugDescription) in \(frames) frames"
        case .fault(let fault): "send \(fault)"
        }
    }
}

/// A frame a client must reject, and the close code RFC 6455 has it answer with.
public enum FrameFault: String, Sendable, CaseIterable, CustomStringConvertible {
    /// A text frame whose payload is not UTF-8: the client fails the connection with 1007.
    case invalidUTF8
    /// A frame with opcode 3, which RFC 6455 reserves: 1002.
    case reservedOpcode
    /// A ping of 126 bytes, over the 125 a control frame may carry: 1002.
    case longControlFrame
    /// A masked frame, which a server must never send: 1002.
    case maskedFrame

    /// The close code a client answers it with.
    public var expectedCloseCode: UInt16 {
        self == .invalidUTF8 ? 1007 : 1002
    }

    public var description: String {
        switch self {
        case .invalidUTF8: "a text frame that is not UTF-8"
        case .reservedOpcode: "a frame with a reserved opcode"
        case .longControlFrame: "a control frame over 125 bytes"
        case .maskedFrame: "a masked frame"
        }
    }
}

/// Which messages a rule applies to: every condition given must hold.
public struct MessageMatch: Sendable, Equatable, CustomStringConvertible {
    var text: String?
    var contains: String?
    var json: JSONValue?
    var nth: Int?

    /// Every message.
    public static let any = MessageMatch()

    /// A text message equal to `text`.
    public static func text(_ text: String) -> MessageMatch { MessageMatch(text: text) }

    /// A text message that contains `text`.
    public static func contains(_ text: String) -> MessageMatch { MessageMatch(contains: text) }

    /// The `n`th message on the connection, from 1.
    public static func nth(_ n: Int) -> MessageMatch { MessageMatch(nth: n) }

    /// A message that parses as JSON and has the members of `object` (a JSON object, as text),
    /// at every depth: `{"type":"ping"}` matches `{"type":"ping","id":3}`.
    /// - Throws: ``ScriptError`` when `object` is not a JSON object.
    public static func json(_ object: String) throws(ScriptError) -> MessageMatch {
        guard let value = JSONValue(object), case .object = value else {
            throw ScriptError(path: "match.json", "must be a JSON object, as text (got \(ScriptJournal.excerpt(object).debugDescription))")
        }
        return MessageMatch(json: value)
    }

    /// This match and `other`'s conditions together.
    public func and(_ other: MessageMatch) -> MessageMatch {
        MessageMatch(
            text: other.text ?? text,
            contains: other.contains ?? contains,
            json: other.json ?? json,
            nth: other.nth ?? nth
        )
    }

    /// Whether `message`, the `number`th on its connection, matches.
    public func matches(_ message: ScriptedMessage, number: Int) -> Bool {
        if let nth, nth != number { return false }
        if let text, message.text != text { return false }
        if let contains, !(message.text?.contains(contains) ?? false) { return false }
        if let json {
            guard let value = JSONValue(String(decoding: message.data, as: UTF8.self)), value.contains(json) else { return false }
        }
        return true
    }

    public var description: String {
        var parts: [String] = []
        if let text { parts.append("text \(text.debugDescription)") }
        if let contains { parts.append("containing \(contains.debugDescription)") }
        if json != nil { parts.append("JSON with given members") }
        if let nth { parts.append("message #\(nth)") }
        return parts.isEmpty ? "any message" : parts.joined(separator: " and ")
    }
}

/// What a scripted WebSocket does with a message that matches.
public struct ScriptRule: Sendable, Equatable, CustomStringConvertible {
    public var match: MessageMatch
    public var actions: [ScriptAction]

    /// A rule: when `match` holds, `actions` run in order, as a script file's
    /// `{"match": …, "do": […]}` says it.
    public init(match: MessageMatch, do actions: [ScriptAction]) {
        self.match = match
        self.actions = actions
    }

    /// A rule without labels; ``init(match:do:)`` says what each argument is.
    @available(*, deprecated, renamed: "init(match:do:)")
    public init(_ match: MessageMatch, _ actions: [ScriptAction]) {
        self.init(match: match, do: actions)
    }

    public var description: String {
        "on \(match): " + actions.map(\.description).joined(separator: ", ")
    }
}

/// Faults applied to every message a scripted WebSocket sends, in this order: a delay, then
/// reordering, duplication and fragmenting, then the drop after the Nth.
public struct WebSocketFaults: Sendable, Equatable, CustomStringConvertible {
    /// Each message waits this long before it is sent (order kept).
    public var delaySends: Duration?
    /// Each pair of messages is sent in swapped order (a lone last one waits for its pair).
    public var reorderSends: Bool
    /// Each message is sent twice.
    public var duplicateSends: Bool
    /// Each text or binary message is sent in this many frames.
    public var fragmentSends: Int?
    /// After the Nth message sent, TCP is closed with no close frame.
    public var dropAfterSending: Int?

    /// Creates faults; none by default.
    public init(
        delaySends: Duration? = nil,
        reorderSends: Bool = false,
        duplicateSends: Bool = false,
        fragmentSends: Int? = nil,
        dropAfterSending: Int? = nil
    ) {
        self.delaySends = delaySends
        self.reorderSends = reorderSends
        self.duplicateSends = duplicateSends
        self.fragmentSends = fragmentSends
        self.dropAfterSending = dropAfterSending
    }

    public var description: String {
        var parts: [String] = []
        if let delaySends { parts.append("delay sends by \(delaySends)") }
        if reorderSends { parts.append("swap each pair of sends") }
        if duplicateSends { parts.append("send each message twice") }
        if let fragmentSends { parts.append("send each message in \(fragmentSends) frames") }
        if let dropAfterSending { parts.append("drop after \(dropAfterSending) sent") }
        return parts.isEmpty ? "no faults" : parts.joined(separator: ", ")
    }
}

/// What a scripted WebSocket route does, as a script file's `websocket` object says.
public struct WebSocketScript: Sendable, Equatable {
    /// The subprotocols it speaks, preferred first.
    public var subprotocols: [String]
    /// What it does once a connection opens.
    public var onConnect: [ScriptAction]
    /// What it does with a message: the first rule that matches applies; a message no rule
    /// matches is only journaled.
    public var onMessage: [ScriptRule]
    /// Whether it answers the client's pings; false withholds the pongs (`"answerPings": false`
    /// in a script file, as the ``ScriptAction/answerPings(_:)`` action spells it).
    public var answerPings: Bool
    /// The former name of ``answerPings``.
    @available(*, deprecated, renamed: "answerPings")
    public var answersPings: Bool {
        get { answerPings }
        set { answerPings = newValue }
    }
    /// Faults on what it sends.
    public var faults: WebSocketFaults
    /// A refusal of the upgrade, for every request or the first few.
    public var refuse: ScriptRefusal?

    /// Creates a script.
    public init(
        subprotocols: [String] = [],
        onConnect: [ScriptAction] = [],
        onMessage: [ScriptRule] = [],
        answerPings: Bool = true,
        faults: WebSocketFaults = .init(),
        refuse: ScriptRefusal? = nil
    ) {
        self.subprotocols = subprotocols
        self.onConnect = onConnect
        self.onMessage = onMessage
        self.answerPings = answerPings
        self.faults = faults
        self.refuse = refuse
    }
}

/// What a scripted SSE route streams: its events in order, one every ``every``, then what
/// ``then`` says. A request with `Last-Event-ID: X` gets the events after the one whose id is
/// `X` (all of them when none has it).
public struct SSEScript: Sendable, Equatable {
    /// The events, in order.
    public var events: [SSEScriptEvent]
    /// The wait before each event (none by default).
    public var every: Duration
    /// What happens after the last event.
    public var then: SSEEnding
    /// A `retry:` field sent first, in milliseconds; none by default.
    public var retryMilliseconds: Int?

    /// Creates a script.
    public init(events: [SSEScriptEvent], every: Duration = .zero, then: SSEEnding = .end, retryMilliseconds: Int? = nil) {
        self.events = events
        self.every = every
        self.then = then
        self.retryMilliseconds = retryMilliseconds
    }

    /// Checks that every event can be written: an id or event name with CR, LF or NUL, or a
    /// negative retry, would be a field a client reads as another (``ScriptedRoute`` refuses a
    /// declared script at start; a script made per request is answered 500, journaled).
    /// - Throws: ``ScriptError`` naming the event.
    public func validate() throws(ScriptError) {
        if let retryMilliseconds, retryMilliseconds < 0 {
            throw ScriptError(path: "retryMilliseconds", "must not be negative (got \(retryMilliseconds))")
        }
        for (index, event) in events.enumerated() where event.raw == nil && event.comment == nil && event.encoded == nil {
            throw ScriptError(path: "events[\(index)]", "an id or event name must not contain CR, LF or NUL, and a retry must not be negative")
        }
    }

    /// The events a request with `lastEventID` gets.
    func events(after lastEventID: String?) -> ArraySlice<SSEScriptEvent> {
        guard let lastEventID, let index = events.lastIndex(where: { $0.id == lastEventID }) else { return events[...] }
        return events[(index + 1)...]
    }
}

/// One item of an SSE script: an event, a comment, or raw text (to cut an event in the middle of
/// a line, say).
public struct SSEScriptEvent: Sendable, Equatable {
    public var id: String?
    public var event: String?
    public var data: String?
    /// A `retry:` field, in milliseconds.
    public var retry: Int?
    /// A comment line (`: text`) instead of an event.
    public var comment: String?
    /// Text written as is, not an event: `"data: hal"` with no line end, then a drop, cuts an
    /// event in the middle of a line.
    public var raw: String?

    /// An event.
    public init(id: String? = nil, event: String? = nil, data: String? = nil, retry: Int? = nil) {
        self.id = id
        self.event = event
        self.data = data
        self.retry = retry
    }

    /// A comment line.
    public static func comment(_ text: String) -> SSEScriptEvent {
        var item = SSEScriptEvent()
        item.comment = text
        return item
    }

    /// Text written as is.
    public static func raw(_ text: String) -> SSEScriptEvent {
        var item = SSEScriptEvent()
        item.raw = text
        return item
    }

    /// The event as DuplexSchema's encoder writes it (an event with no `data` only sets its
    /// fields: no `data` line, so the client dispatches nothing). Nil when the id or the event
    /// name holds CR, LF or NUL, or the retry is negative: ``SSEScript/validate()`` refuses those.
    var encoded: String? {
        let event = ServerSentEvent(id: id, event: self.event, data: data ?? "", retry: retry)
        guard let text = try? event.encoded() else { return nil }
        // An empty payload is encoded as a "data" line; an event with no data has none.
        return data == nil ? String(text.dropLast("data\n\n".count)) + "\n" : text
    }

    /// The text written for it.
    var wireText: String {
        if let raw { return raw }
        if let comment { return ServerSentEvent.comment(comment) + "\n" }
        return encoded ?? ""
    }
}

/// How a scripted SSE stream ends after its last event.
public enum SSEEnding: String, Sendable, CaseIterable {
    /// The response ends normally.
    case end
    /// TCP is closed with the response unfinished (HTTP/2: the stream is reset).
    case drop
    /// The stream stays open, silent.
    case hang
    /// The stream stays open, sending only comment lines, one every ``SSEScript/every`` (or
    /// second): a stall that is not silent.
    case comments
}

/// A script that cannot be used: where, and why.
public struct ScriptError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Where in the script, such as `routes[1].websocket.onMessage[0].match`.
    public var path: String
    /// What is wrong.
    public var reason: String

    /// Creates an error.
    public init(path: String, _ reason: String) {
        self.path = path
        self.reason = reason
    }

    public var description: String { path.isEmpty ? reason : "\(path): \(reason)" }
}
