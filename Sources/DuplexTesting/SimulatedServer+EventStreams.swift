import DuplexHost
public import DuplexSchema
import DuplexScripted
import NIOConcurrencyHelpers
import NIOCore

extension SimulatedServer {
    /// An answer to an event stream's request that is not the stream, such as a 503 with
    /// `Retry-After`: the client reads it whole, and its connection ends.
    public struct HTTPAnswer: Sendable, Equatable {
        /// The status code.
        public var status: Int
        /// The response's headers.
        public var headers: [String: String]
        /// The response's body.
        public var body: String

        /// Creates an answer.
        public init(status: Int, headers: [String: String] = [:], body: String = "") {
            self.status = status
            self.headers = headers
            self.body = body
        }
    }

    /// Publishes `event` on every open event stream, and keeps it for streams that resume: a
    /// request whose `Last-Event-ID` is the id of a kept event gets every event published after
    /// that one first. A request with no `Last-Event-ID`, or one the server never published, gets
    /// the events published from then on. Every event is kept until the simulation ends.
    /// - Throws: `ServerSentEventError` when the event cannot be encoded (an id or event name
    ///   with CR, LF or NUL, a negative retry).
    public func publish(_ event: ServerSentEvent) throws(ServerSentEventError) {
        let text = try event.encoded()
        let streams = state.withLockedValue { state in
            state.published.append((event.id, text))
            return Self.inOrder(state.streams)
        }
        network?.record("server \(name) publishes \(Self.describe(event))")
        for stream in streams { stream.serverSends(text, Self.describe(event)) }
    }

    /// The reconnection time the server asks for with `retry:` at the start of each event stream,
    /// before any event; nil (the default) sends none.
    public var eventStreamRetry: Duration? {
        get { state.withLockedValue { $0.eventStreamRetry } }
        set { state.withLockedValue { $0.eventStreamRetry = newValue } }
    }

    /// What the server answers event streams' requests with instead of its stream (a 503 with
    /// `Retry-After`, a 401); nil (the default) serves the stream.
    public var eventStreamAnswer: HTTPAnswer? {
        get { state.withLockedValue { $0.eventStreamAnswer } }
        set { state.withLockedValue { $0.eventStreamAnswer = newValue } }
    }

    /// The `Last-Event-ID` of each event stream's request it answered, in order (nil for a request
    /// with none).
    public var lastEventIDsReceived: [String?] {
        state.withLockedValue { $0.lastEventIDs }
    }

    /// What the server sends for an event stream's request.
    struct StreamAnswer {
        var status: Int
        var headers: [String: String]
        /// The body's chunks, each with its line in the log.
        var chunks: [(text: String, line: String)]
        /// Whether the response ends after them.
        var ends: Bool
        /// A scripted route's stream, to set going once the head is on its way.
        var scripted: ScriptedStream?
    }

    /// The answer to `stream`'s `request`, or nil when the server is down: a scripted SSE
    /// route's when one matches its method and path (its refusal, or its stream), else the
    /// server's own. A stream it serves is open from now: what the server publishes goes to it.
    func answer(_ stream: SimulatedEventStream, request: ScriptedRequest) -> StreamAnswer? {
        let (isUp, routes) = state.withLockedValue { ($0.isUp, $0.routes) }
        guard isUp else { return nil }
        let route = routes.first { $0.route.isScriptedStream && $0.route.method == request.method && $0.pattern.match(request.path) != nil }
        guard let route = route?.route else { return published(stream, lastEventID: request.lastEventID) }
        let opening = route.openStream(request, journal: journal)
        let served = state.withLockedValue { state -> Bool in
            guard state.isUp else { return false }
            state.accepted += 1
            state.lastEventIDs.append(request.lastEventID)
            if case .streaming = opening { state.streams[stream.number] = stream }
            return true
        }
        guard served else { return nil }
        switch opening {
        case .refused(let status, let headers, let body)?:
            return StreamAnswer(status: status, headers: headers, chunks: body.isEmpty ? [] : [(body, "body \(body.utf8.count) bytes")], ends: true)
        case .invalid(let reason)?:
            let body = ScriptedStreamOpening.invalidBody(reason)
            let chunks = [(body, "body \(body.utf8.count) bytes")]
            return StreamAnswer(status: 500, headers: ["Content-Type": "application/json"], chunks: chunks, ends: true)
        case .streaming(let scripted)?:
            return StreamAnswer(status: 200, headers: ["Content-Type": "text/event-stream"], chunks: [], ends: false, scripted: scripted)
        case nil:
            return nil
        }
    }

    /// The server's own stream of what it ``publish(_:)``es, from after `lastEventID`.
    private func published(_ stream: SimulatedEventStream, lastEventID: String?) -> StreamAnswer? {
        state.withLockedValue { state in
            guard state.isUp else { return nil }
            state.accepted += 1
            state.lastEventIDs.append(lastEventID)
            if let answer = state.eventStreamAnswer {
                let chunks = answer.body.isEmpty ? [] : [(answer.body, "body \(answer.body.utf8.count) bytes")]
                return StreamAnswer(status: answer.status, headers: answer.headers, chunks: chunks, ends: true)
            }
            state.streams[stream.number] = stream
            var chunks: [(text: String, line: String)] = []
            if let retry = state.eventStreamRetry {
                let milliseconds = retry.components.seconds * 1_000 + retry.components.attoseconds / 1_000_000_000_000_000
                chunks.append(("retry: \(milliseconds)\n\n", "retry \(milliseconds) ms"))
            }
            if let lastEventID, let last = state.published.lastIndex(where: { $0.id == lastEventID }) {
                for (id, text) in state.published[(last + 1)...] { chunks.append((text, "event \(id ?? "with no id") (resent)")) }
            }
            return StreamAnswer(status: 200, headers: ["Content-Type": "text/event-stream"], chunks: chunks, ends: false)
        }
    }

    func forget(_ stream: SimulatedEventStream) {
        _ = state.withLockedValue { $0.streams.removeValue(forKey: stream.number) }
    }

    private static func describe(_ event: ServerSentEvent) -> String {
        "event \(event.id ?? "with no id")\(event.event.map { " (\($0))" } ?? "")"
    }
}
