public import Duplex
import DuplexHost
public import Foundation

/// One step of what a proxy route does to a message on its way (a rule's `do` list; a script
/// file writes each as an object: `{"delayMs": 50}`, `{"replace": "…"}`, `{"forward": false}`;
/// `docs/scripts.md`).
///
/// The steps run in order, at their place in the list; then the message, as the steps left it,
/// is forwarded unless a ``forward(_:)`` of false stands anywhere in the list, or a ``close(code:reason:)``
/// or ``drop`` ended the connection (no step runs after those).
public struct ProxyAction: Sendable, Equatable, CustomStringConvertible {
    enum Step: Sendable, Equatable {
        case delay(Duration)
        case replace(ScriptedMessage)
        case set([String: JSONValue])
        case send(ScriptedMessage)
        case reply(ScriptedMessage)
        case forward(Bool)
        case duplicate
        case close(code: UInt16, reason: String)
        case drop
        case fragment(frames: Int)
        case fault(FrameFault)
        case answerPings(Bool)
        case cut
        case hang
    }

    let step: Step

    /// Waits before the steps after it; the later messages of the same direction wait too, so
    /// order is kept.
    public static func delay(_ duration: Duration) -> ProxyAction { ProxyAction(step: .delay(duration)) }

    /// Forwards `text` instead of the message.
    public static func replace(_ text: String) -> ProxyAction { ProxyAction(step: .replace(.text(text))) }

    /// Sets top-level members of a JSON object message before it is forwarded; `members` is a
    /// JSON object, as text (`{"price": 0}`). A message that is not a JSON object is forwarded
    /// unchanged, and the journal says so.
    /// - Throws: ``ScriptError`` when `members` is not a JSON object.
    public static func set(_ members: String) throws(ScriptError) -> ProxyAction {
        guard case .object(let fields)? = JSONValue(members) else {
            throw ScriptError(path: "set", "must be a JSON object, as text (got \(ScriptJournal.excerpt(members).debugDescription))")
        }
        return ProxyAction(step: .set(fields))
    }

    /// Sends `text` to this direction's receiver, before the forwarded message.
    public static func send(_ text: String) -> ProxyAction { ProxyAction(step: .send(.text(text))) }

    /// Sends `value` encoded as JSON to this direction's receiver, before the forwarded message.
    public static func sendJSON(_ value: some Encodable, encoder: JSONEncoder = JSONEncoder()) throws -> ProxyAction {
        .send(String(decoding: try encoder.encode(value), as: UTF8.self))
    }

    /// Sends `text` back to this direction's sender (the upstream never sees a client's message
    /// that a rule replies to and does not forward).
    public static func reply(_ text: String) -> ProxyAction { ProxyAction(step: .reply(.text(text))) }

    /// Whether the message is forwarded: false holds it back, wherever it stands in the list.
    public static func forward(_ forwards: Bool) -> ProxyAction { ProxyAction(step: .forward(forwards)) }

    /// Forwards the message twice.
    public static let duplicate = ProxyAction(step: .duplicate)

    /// Closes the client's connection with `code` and `reason`, and the upstream's normally
    /// (1000); nothing is forwarded.
    public static func close(code: UInt16, reason: String = "") -> ProxyAction { ProxyAction(step: .close(code: code, reason: reason)) }

    /// Drops both connections with no close frame; nothing is forwarded.
    public static let drop = ProxyAction(step: .drop)

    /// Forwards the message to the client in `frames` frames of about equal size (a WebSocket
    /// route's `toClient` rules only).
    public static func fragment(frames: Int) -> ProxyAction { ProxyAction(step: .fragment(frames: max(frames, 1))) }

    /// Sends the client a frame it must reject (``FrameFault``), before the forwarded message: the
    /// client should fail the connection with ``FrameFault/expectedCloseCode``, which is passed
    /// to the upstream (a WebSocket route's `toClient` rules only).
    public static func fault(_ fault: FrameFault) -> ProxyAction { ProxyAction(step: .fault(fault)) }

    /// From now on, the client's pings are answered (true) or not (false) on this connection: a
    /// route that withholds pongs fails a client's keepalive (a WebSocket route's rules, either
    /// direction).
    public static func answerPings(_ answers: Bool) -> ProxyAction { ProxyAction(step: .answerPings(answers)) }

    /// Writes the first half of the event to the client, then cuts the stream in the middle of it
    /// (TCP closed, or over HTTP/2 the stream reset); the upstream's stream ends too (an SSE
    /// route's rules only).
    public static let cut = ProxyAction(step: .cut)

    /// Leaves the client's stream open and silent from now on: nothing more is forwarded, and the
    /// upstream's stream ends (an SSE route's rules only).
    public static let hang = ProxyAction(step: .hang)

    public var description: String {
        switch step {
        case .delay(let duration): "wait \(duration)"
        case .replace(let message): "replace with \(message.excerpt.debugDescription)"
        case .set(let fields): "set \(fields.keys.sorted().joined(separator: ", "))"
        case .send(let message): "send \(message.excerpt.debugDescription)"
        case .reply(let message): "reply \(message.excerpt.debugDescription)"
        case .forward(let forwards): forwards ? "forward" : "hold back"
        case .duplicate: "forward twice"
        case .close(let code, let reason): "close \(code)" + (reason.isEmpty ? "" : " \(reason.debugDescription)")
        case .drop: "drop both connections"
        case .fragment(let frames): "forward in \(frames) frames"
        case .fault(let fault): "send \(fault)"
        case .answerPings(let answers): answers ? "answer pings" : "withhold pongs"
        case .cut: "cut the stream in the middle of the event"
        case .hang: "hang: the stream stays open, silent"
        }
    }
}

/// What a proxy route does with a message that matches, in one direction.
public struct ProxyRule: Sendable, Equatable, CustomStringConvertible {
    /// Which messages it applies to; ``MessageMatch/nth(_:)`` counts that direction's messages
    /// on the connection, from 1, as they arrive (messages a rule injected or replied are not
    /// counted).
    public var match: MessageMatch
    /// What it does, in order.
    public var actions: [ProxyAction]

    /// A rule: when `match` holds, `actions` run in order, as a script file's
    /// `{"match": …, "do": […]}` says it.
    public init(match: MessageMatch, do actions: [ProxyAction]) {
        self.match = match
        self.actions = actions
    }

    public var description: String {
        "on \(match): " + actions.map(\.description).joined(separator: ", ")
    }
}

/// What a proxy route does: where it forwards, and its rules per direction (a script file's
/// `proxy` object).
public struct ProxyScript: Sendable, Equatable {
    /// The upstream: a `ws` or `wss` URL for a WebSocket proxy, `http` or `https` for an SSE
    /// one. The client's path is not appended (but see ``appendsPath``); its query is, when the
    /// upstream's URL has none.
    public var upstream: URL
    /// The rules for the client's messages on their way to the upstream: the first that
    /// matches applies; a message none matches is forwarded unchanged.
    public var toUpstream: [ProxyRule]
    /// The rules for the upstream's messages (an SSE upstream's events: `nth` counts events, and
    /// `text`, `contains` and `json` match an event's data) on their way to the client.
    public var toClient: [ProxyRule]
    /// A refusal of the client's upgrade before the upstream is asked, for every request or the
    /// first few (`"refuse": {"status": 429, "headers": {"Retry-After": "1"}, "times": 2}`).
    public var refuse: ScriptRefusal?
    /// The certificates a `wss` upstream's are checked against, as the client's
    /// (`WebSocketConfiguration.tlsTrust`).
    public var tlsTrust: TLSTrust
    /// The certificate the route presents to a `wss` upstream that asks for one.
    public var tlsIdentity: TLSIdentity?
    /// Which HTTP the upstream is asked over; nil: each client's default (HTTP/1.1 for a
    /// WebSocket, `automatic` for SSE). Over HTTP/2 (a `wss` or `https`
    /// upstream), the route's connections to one upstream share one TCP and TLS connection,
    /// each on a stream of its own.
    public var httpVersion: HTTPVersionPreference?
    /// Whether the client's path is appended to the upstream's (a proxy for a whole server, as
    /// `duplex intercept` runs: `ws://host/api` and a request for `/feed` ask `ws://host/api/feed`);
    /// false by default: every request asks ``upstream`` itself.
    public var appendsPath = false

    /// Creates a proxy script.
    public init(
        upstream: URL, toUpstream: [ProxyRule] = [], toClient: [ProxyRule] = [], refuse: ScriptRefusal? = nil,
        tlsTrust: TLSTrust = .systemRoots, tlsIdentity: TLSIdentity? = nil
    ) {
        self.upstream = upstream
        self.toUpstream = toUpstream
        self.toClient = toClient
        self.refuse = refuse
        self.tlsTrust = tlsTrust
        self.tlsIdentity = tlsIdentity
    }

    /// The upstream URL for a client's request of `path` with `query`: with ``appendsPath``, the
    /// path joined to the upstream's; the upstream's own query, or else the client's. Nil when
    /// they do not make a URL. Joined as text and parsed, never set on `URLComponents`, whose
    /// percent-encoded setters trap on bad percent-encoding (`/%ZZ`).
    func upstreamURL(path: String, query: String?) -> URL? {
        var text = upstream.absoluteString
        if let mark = text.firstIndex(where: { $0 == "?" || $0 == "#" }) { text = String(text[..<mark]) }
        if appendsPath {
            guard path.hasPrefix("/") else { return nil }
            text = (text.hasSuffix("/") ? String(text.dropLast()) : text) + path
        }
        if let own = upstream.query {
            text += "?" + own
        } else if let query, !query.isEmpty {
            text += "?" + query
        }
        return URL(string: text)
    }

    /// Whether the upstream serves SSE (an `http` or `https` URL): the route is then an HTTP
    /// route whose `toClient` rules apply to each event.
    public var isEventStream: Bool {
        ["http", "https"].contains(upstream.scheme?.lowercased() ?? "")
    }

    /// Checks that the upstream is a `ws`, `wss`, `http` or `https` URL with a host, that an SSE
    /// proxy has no `toUpstream` rules and no `reply` (its client sends no messages), and that
    /// each step is one the proxy's kind and the rule's direction take.
    /// - Throws: ``ScriptError`` at the place.
    public func validate() throws(ScriptError) {
        guard let scheme = upstream.scheme?.lowercased(), ["ws", "wss", "http", "https"].contains(scheme), upstream.host?.isEmpty == false else {
            throw ScriptError(
                path: "upstream", "must be a ws://, wss://, http:// or https:// URL with a host (got \(upstream.absoluteString.debugDescription))")
        }
        if isEventStream, !toUpstream.isEmpty {
            throw ScriptError(path: "toUpstream", "an SSE proxy (an http:// or https:// upstream) has no toUpstream: its client sends no messages")
        }
        for (name, rules) in [("toUpstream", toUpstream), ("toClient", toClient)] {
            for (index, rule) in rules.enumerated() {
                for (place, action) in rule.actions.enumerated() {
                    let at = "\(name)[\(index)].do[\(place)]"
                    if isEventStream, case .reply = action.step {
                        throw ScriptError(path: at, "an SSE proxy cannot reply: the upstream takes no messages")
                    }
                    guard let only = action.step.only else { continue }
                    switch (only.onWebSocket, isEventStream) {
                    case (true, true): throw ScriptError(path: at, "\(only.name) applies to a WebSocket proxy (a ws:// or wss:// upstream)")
                    case (false, false):
                        throw ScriptError(path: at, "\(only.name) applies to an SSE proxy's events (an http:// or https:// upstream)")
                    default: break
                    }
                    if only.towardClient, name == "toUpstream" {
                        throw ScriptError(path: at, "\(only.name) applies toward the client: a toClient rule")
                    }
                }
            }
        }
    }
}

extension ProxyAction.Step {
    /// Where a step applies when not on every proxy: its name as a script writes it, whether it
    /// is a WebSocket proxy's (else an SSE proxy's), and whether toward the client alone; nil for
    /// a step every proxy takes.
    var only: (name: String, onWebSocket: Bool, towardClient: Bool)? {
        switch self {
        case .fragment: ("fragment", true, true)
        case .fault: ("fault", true, true)
        case .answerPings: ("answerPings", true, false)
        case .cut: ("cut", false, true)
        case .hang: ("hang", false, true)
        default: nil
        }
    }
}

extension ScriptedMessage {
    /// The text, or the size of a binary message, cut for a description.
    var excerpt: String {
        switch self {
        case .text(let text): ScriptJournal.excerpt(text)
        case .binary(let data): "\(data.count) bytes"
        }
    }
}
