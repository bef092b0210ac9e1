import DuplexHost
public import Foundation
import NIOConcurrencyHelpers

/// A route of your own protocol that the server serves beside its built-in ones: a WebSocket or
/// an SSE stream that a test (`DuplexServerConfiguration.routes`) or a script file
/// (`duplex-server --script FILE`, ``ScriptFile``) describes. Everything a scripted route serves
/// and receives is written to the server's `DuplexServer.journal`.
///
/// A WebSocket route answers as its handler or its ``WebSocketScript`` says:
///
/// ```swift
/// let feed = ScriptedRoute.webSocket("/feed", subprotocols: ["feed.v1"]) { socket in
///     try socket.send(#"{"type":"hello"}"#)
/// } onMessage: { message, socket in
///     if message.text == #"{"type":"ping"}"# { try socket.send(#"{"type":"pong"}"#) }
/// }
/// ```
///
/// An SSE route sends the events of its ``SSEScript``, then ends, drops or hangs.
public struct ScriptedRoute: Sendable, CustomStringConvertible {
    /// The path, such as `/feed`; a segment `:name` matches any one segment, `*` any one, `**`
    /// the rest.
    public let path: String
    /// The method: `GET` for a WebSocket (or HTTP/2's `CONNECT`), `GET` or another for SSE.
    public let method: String
    let kind: Kind
    /// The script a declarative WebSocket route follows; nil for one served by handlers.
    public private(set) var webSocketScript: WebSocketScript?
    /// The script of an SSE route that streams the same script to every request; nil otherwise.
    public private(set) var sseScript: SSEScript?
    /// The protocol a preset route speaks (`graphql-transport-ws`, `socket.io`, `mqtt`); nil for
    /// other routes.
    public private(set) var preset: String?
    /// What a proxy route forwards to and its rules; nil for other routes.
    public var proxyScript: ProxyScript? {
        if case .proxy(let proxy) = kind { proxy.script } else { nil }
    }

    enum Kind: Sendable {
        case webSocket(WebSocketRouteHandler)
        case sse(SSERouteHandler)
        case proxy(ProxyRouteState)
    }

    public var description: String {
        switch kind {
        case .webSocket: "WebSocket \(path)" + (preset.map { " (\($0))" } ?? "")
        case .sse: "SSE \(method) \(path)"
        case .proxy(let proxy):
            (proxy.script.isEventStream ? "SSE \(method) \(path)" : "WebSocket \(path)") + ", proxied to \(proxy.script.upstream.absoluteString)"
        }
    }

    /// A WebSocket route in front of your real backend: each client's upgrade is passed to
    /// `upstream` first (its headers, but for the hop's own, and the subprotocols it offers),
    /// and answered as the upstream answered (the subprotocol it chose, or its refusal: status,
    /// `Retry-After` and body); an upstream that cannot be reached answers 502, saying why.
    /// Then every message is forwarded both ways, in order, through the rules of its direction:
    /// the first rule that matches a message applies; a message none matches is forwarded
    /// unchanged. Both legs of each connection are journaled.
    ///
    /// ```swift
    /// let quotes = ScriptedRoute.proxy("/quotes", to: URL(string: "ws://127.0.0.1:8080/quotes")!,
    ///     toClient: [ProxyRule(match: .nth(3), do: [.forward(false)])])
    /// ```
    /// - Parameters:
    ///   - path: the route's path.
    ///   - upstream: a `ws` or `wss` URL; the client's query is added when it has none.
    ///   - toUpstream: the rules for the client's messages.
    ///   - toClient: the rules for the upstream's messages.
    public static func proxy(_ path: String, to upstream: URL, toUpstream: [ProxyRule] = [], toClient: [ProxyRule] = []) -> ScriptedRoute {
        proxy(path, script: ProxyScript(upstream: upstream, toUpstream: toUpstream, toClient: toClient), tap: nil)
    }

    /// A route in front of your real backend, as `script` says (its upstream, its rules per
    /// direction, its refusals and the upstream's TLS trust); see
    /// ``proxy(_:to:toUpstream:toClient:)``. With an `http` or `https` upstream it is an SSE
    /// route for `method`: the request (its method, headers but the hop's own, `Last-Event-ID`
    /// and body) goes upstream, and the `toClient` rules apply to each event of the answer, whose
    /// id and event name a `replace` or `set` keeps; an answer that is not an event stream, or
    /// not 2xx, is passed on as it was (its status, `Retry-After`, `Content-Type` and up to
    /// 64 KiB of body). A WebSocket proxy's method is `GET`.
    public static func proxy(_ path: String, method: String = "GET", script: ProxyScript) -> ScriptedRoute {
        proxy(path, method: method, script: script, tap: nil)
    }

    /// A proxy route whose connections `tap` is told of (the recorder's).
    package static func proxy(_ path: String, method: String = "GET", script: ProxyScript, tap: ProxyTapFactory?) -> ScriptedRoute {
        ScriptedRoute(
            path: path, method: script.isEventStream ? method.uppercased() : "GET",
            kind: .proxy(ProxyRouteState(script: script, refusals: RefusalCounter(script.refuse), breakpoints: ProxyBreakpoints(), tap: tap)))
    }

    /// A WebSocket route whose connections a handler serves.
    ///
    /// The handlers run on the connection's event loop, one call at a time per connection: keep
    /// them short and send from them (or from anywhere else, through the ``ScriptedWebSocket``
    /// they get). A handler that throws closes the connection with 1011 and journals the error.
    /// - Parameters:
    ///   - path: the route's path.
    ///   - subprotocols: the subprotocols the route speaks, preferred first: the first the client
    ///     offers is chosen; none is chosen when it offers none of them (or when this is empty).
    ///   - faults: faults applied to every message the route sends (``WebSocketFaults``).
    ///   - answerPings: whether the client's pings get a pong; false withholds them, so that a
    ///     client that pings sees its pings fail (``ScriptedWebSocket/answerPings``).
    ///   - onConnect: the connection is open.
    ///   - onMessage: a whole message arrived.
    ///   - accept: decides the upgrade: ``UpgradeDecision/accept`` or a refusal with any status
    ///     and headers.
    public static func webSocket(
        _ path: String,
        subprotocols: [String] = [],
        faults: WebSocketFaults = .init(),
        answerPings: Bool = true,
        onConnect: @escaping @Sendable (ScriptedWebSocket) throws -> Void = { _ in },
        onMessage: @escaping @Sendable (ScriptedMessage, ScriptedWebSocket) throws -> Void = { _, _ in },
        accept: @escaping @Sendable (ScriptedRequest) -> UpgradeDecision = { _ in .accept }
    ) -> ScriptedRoute {
        ScriptedRoute(
            path: path,
            method: "GET",
            kind: .webSocket(
                WebSocketRouteHandler(
                    subprotocols: subprotocols,
                    faults: faults,
                    answerPings: answerPings,
                    accept: accept,
                    onConnect: onConnect,
                    onMessage: onMessage
                )
            )
        )
    }

    /// The former spelling of ``webSocket(_:subprotocols:faults:answerPings:onConnect:onMessage:accept:)``.
    @available(*, deprecated, renamed: "webSocket(_:subprotocols:faults:answerPings:onConnect:onMessage:accept:)")
    public static func webSocket(
        _ path: String,
        subprotocols: [String] = [],
        faults: WebSocketFaults = .init(),
        answersPings: Bool,
        onConnect: @escaping @Sendable (ScriptedWebSocket) throws -> Void = { _ in },
        onMessage: @escaping @Sendable (ScriptedMessage, ScriptedWebSocket) throws -> Void = { _, _ in },
        accept: @escaping @Sendable (ScriptedRequest) -> UpgradeDecision = { _ in .accept }
    ) -> ScriptedRoute {
        webSocket(
            path, subprotocols: subprotocols, faults: faults, answerPings: answersPings, onConnect: onConnect, onMessage: onMessage,
            accept: accept)
    }

    /// A WebSocket route that answers as `script` says: its actions on connect, the first rule
    /// that matches each message, its refusals and faults.
    /// - Parameters:
    ///   - path: the route's path.
    ///   - script: what the route does.
    public static func webSocket(_ path: String, script: WebSocketScript) -> ScriptedRoute {
        let refusals = RefusalCounter(script.refuse)
        var route = ScriptedRoute.webSocket(
            path,
            subprotocols: script.subprotocols,
            faults: script.faults,
            answerPings: script.answerPings,
            onConnect: { socket in socket.run(script.onConnect) },
            onMessage: { message, socket in
                if let rule = script.onMessage.first(where: { $0.match.matches(message, number: socket.messagesReceived) }) {
                    socket.run(rule.actions)
                }
            },
            accept: { _ in refusals.next() }
        )
        route.webSocketScript = script
        return route
    }

    /// A WebSocket route that speaks a protocol preset `name` through its handlers, on the same
    /// engine, journal and close vocabulary as every scripted route.
    static func preset(
        _ path: String,
        name: String,
        subprotocols: [String],
        faults: WebSocketFaults,
        accept: @escaping @Sendable (ScriptedRequest) -> UpgradeDecision = { _ in .accept },
        onConnect: @escaping @Sendable (ScriptedWebSocket) throws -> Void,
        onMessage: @escaping @Sendable (ScriptedMessage, ScriptedWebSocket) throws -> Void,
        onEnd: @escaping @Sendable (ScriptedWebSocket) -> Void
    ) -> ScriptedRoute {
        var handler = WebSocketRouteHandler(
            subprotocols: subprotocols, faults: faults, answerPings: true, accept: accept, onConnect: onConnect, onMessage: onMessage)
        handler.onEnd = onEnd
        var route = ScriptedRoute(path: path, method: "GET", kind: .webSocket(handler))
        route.preset = name
        return route
    }

    /// An SSE route that streams `script`, the same for every request it accepts.
    /// - Parameters:
    ///   - path: the route's path.
    ///   - method: the request method, `GET` by default; a `POST` (or any method but `GET`)
    ///     route reads the request's body, journaled with the request.
    ///   - accept: decides the request: ``UpgradeDecision/accept`` or a refusal.
    ///   - script: the events, their pace, and the stream's ending.
    public static func sse(
        _ path: String,
        method: String = "GET",
        accept: @escaping @Sendable (ScriptedRequest) -> UpgradeDecision = { _ in .accept },
        script: SSEScript
    ) -> ScriptedRoute {
        var route = ScriptedRoute.sse(path, method: method, accept: accept) { _ in script }
        route.sseScript = script
        return route
    }

    /// An SSE route that streams, for each request it accepts, the script `respond` makes of it
    /// (from its body, say).
    /// - Parameters:
    ///   - path: the route's path.
    ///   - method: the request method, `GET` by default.
    ///   - accept: decides the request: ``UpgradeDecision/accept`` or a refusal.
    ///   - respond: the script for an accepted request.
    public static func sse(
        _ path: String,
        method: String = "GET",
        accept: @escaping @Sendable (ScriptedRequest) -> UpgradeDecision = { _ in .accept },
        respond: @escaping @Sendable (ScriptedRequest) -> SSEScript
    ) -> ScriptedRoute {
        ScriptedRoute(path: path, method: method.uppercased(), kind: .sse(SSERouteHandler(accept: accept, respond: respond)))
    }

    /// An SSE route that streams `script`, refusing requests as its ``SSEScript/refuse`` says.
    static func sse(_ path: String, method: String, script: SSEScript, refuse: ScriptRefusal?) -> ScriptedRoute {
        let refusals = RefusalCounter(refuse)
        return .sse(path, method: method, accept: { _ in refusals.next() }, script: script)
    }
}

/// What a scripted route answers an upgrade or a stream request.
public enum UpgradeDecision: Sendable, Equatable {
    /// Serve it.
    case accept
    /// Answer `status` with `headers` and `body` (JSON unless `headers` name a `Content-Type`)
    /// instead: 401, 403, 429 with `Retry-After`, 503.
    case refuse(status: Int, headers: [String: String] = [:], body: String = "")

    /// A refusal as a script file writes it.
    init(_ refusal: ScriptRefusal) {
        self = .refuse(status: refusal.status, headers: refusal.headers, body: refusal.body)
    }
}

/// A scripted refusal: a status, its headers and body, for the first `times` requests (all of
/// them when nil).
public struct ScriptRefusal: Sendable, Equatable, CustomStringConvertible {
    /// The status, 400 to 599.
    public var status: Int
    /// Header fields to send, such as `Retry-After`.
    public var headers: [String: String]
    /// The body.
    public var body: String
    /// How many requests are refused before the route serves; nil: every one.
    public var times: Int?

    /// Creates a refusal.
    public init(status: Int, headers: [String: String] = [:], body: String = "", times: Int? = nil) {
        self.status = status
        self.headers = headers
        self.body = body
        self.times = times
    }

    public var description: String {
        "refuse \(status)" + (times.map { " the first \($0) times" } ?? "") + (headers.isEmpty ? "" : " with \(headers.sorted { $0.key < $1.key })")
    }
}

/// Counts the requests a ``ScriptRefusal`` refused.
final class RefusalCounter: Sendable {
    private let refusal: ScriptRefusal?
    private let refused = NIOLockedValueBox(0)

    init(_ refusal: ScriptRefusal?) {
        self.refusal = refusal
    }

    /// Refuses while the refusal lasts, then accepts.
    func next() -> UpgradeDecision {
        guard let refusal else { return .accept }
        if let times = refusal.times {
            let count = refused.withLockedValue { count in
                count += 1
                return count
            }
            if count > times { return .accept }
        }
        return UpgradeDecision(refusal)
    }
}

/// The request a scripted route is asked: the upgrade request of a WebSocket, the request of an
/// SSE stream.
public struct ScriptedRequest: Sendable, Codable, Equatable {
    /// The method (`GET`; `CONNECT` for a WebSocket over HTTP/2).
    public var method: String
    /// The path, without the query.
    public var path: String
    /// The query, without `?`; nil when there is none.
    public var query: String?
    /// The header fields, in order, names as sent.
    public var headers: [Header]
    /// The subprotocols a WebSocket request offers, in order.
    public var subprotocols: [String]
    /// The subprotocol the route chose; nil when none.
    public var subprotocol: String?
    /// An SSE request's `Last-Event-ID`.
    public var lastEventID: String?
    /// An SSE request's body, as UTF-8 text when it is; see ``bodyBase64`` otherwise.
    public var body: String?
    /// An SSE request's body in base64, when it is not UTF-8.
    public var bodyBase64: String?

    /// A header field.
    public struct Header: Sendable, Codable, Equatable {
        public var name: String
        public var value: String
    }

    /// The first value of the field `name` (compared without case).
    public func header(_ name: String) -> String? {
        headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// The value of the query parameter `name`, percent-decoded; nil when absent.
    public func queryItem(_ name: String) -> String? {
        guard let query else { return nil }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = String(parts[0]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(parts[0])
            guard key == name else { continue }
            let value = parts.count > 1 ? String(parts[1]) : ""
            return value.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? value
        }
        return nil
    }
}

/// A message a scripted WebSocket received.
public enum ScriptedMessage: Sendable, Equatable {
    case text(String)
    case binary(Data)

    /// The text of a text message; nil for a binary one.
    public var text: String? {
        if case .text(let text) = self { text } else { nil }
    }

    /// The message's bytes: a text message's UTF-8.
    public var data: Data {
        switch self {
        case .text(let text): Data(text.utf8)
        case .binary(let data): data
        }
    }

    /// The message decoded from JSON (text or binary).
    public func decode<T: Decodable>(_ type: T.Type, decoder: JSONDecoder = JSONDecoder()) throws -> T {
        try decoder.decode(type, from: data)
    }
}
