import DuplexHost
public import DuplexSchema
import Foundation

/// What a server that replays a `Cassette` serves, and how (`DuplexServerConfiguration.replay`, `withReplayServer`, or `duplex replay`).
///
/// The server then serves the cassette's paths, besides `/health`, `/metrics` and, with `chaos`,
/// the chaos routes, and with ``builtInRoutes`` the loopback server's own routes where the
/// cassette has none (a cassette replayed on `/chat/lobby` while `/echo` echoes): the n-th connection to a path replays the n-th session recorded
/// there, and after the last one they start over. A WebSocket client gets the server's messages
/// in order, each once the client's messages recorded before it have arrived and its recorded
/// delay after the step before it has passed (divided by ``speed``); an SSE client gets the
/// recorded events, after the one its `Last-Event-ID` names when the recording has it.
///
/// In strict mode the client's messages are checked against the recording with ``matcher``; the
/// first that does not match (or that the recording does not have) is reported to
/// ``onMismatch`` and in the server's log with both sides, and the connection is closed with
/// 1008 (policy violation).
public struct ReplayConfiguration: Sendable {
    /// The sessions to serve.
    public var cassette: Cassette
    /// How much faster than recorded the server's steps follow each other: 2 halves every delay.
    /// `.infinity` sends each step as soon as the client's messages before it have arrived.
    public var speed: Double
    /// Whether the client's messages are checked against the recording.
    public var strict: Bool
    /// How a client's message is compared with the recorded one, in strict mode.
    public var matcher: ReplayMatcher
    /// Called with each mismatch, in strict mode, from any thread.
    public var onMismatch: (@Sendable (ReplayMismatch) -> Void)?
    /// Whether the server's built-in routes (`/echo`, `/chat/{room}`, `/events`, …) answer where
    /// the cassette recorded nothing: the cassette's paths come first. Default false: any
    /// other path is 404.
    public var builtInRoutes = false

    /// Replays `cassette`, at the recorded speed and strictly, comparing messages exactly.
    public init(
        cassette: Cassette,
        speed: Double = 1,
        strict: Bool = true,
        matcher: ReplayMatcher = .exact,
        onMismatch: (@Sendable (ReplayMismatch) -> Void)? = nil
    ) {
        self.cassette = cassette
        self.speed = speed
        self.strict = strict
        self.matcher = matcher
        self.onMismatch = onMismatch
    }

    /// How long a recorded delay lasts at ``speed``: at most a year.
    func scaled(_ delay: Duration) -> Duration {
        guard speed.isFinite else { return .zero }
        let seconds = Double(delay.components.seconds) + Double(delay.components.attoseconds) / 1e18
        return .seconds(min(max(seconds / speed, 0), 366 * 86_400))
    }
}

/// How a replay server compares the message a client sent with the one recorded.
/// A binary message is always compared byte for byte.
public enum ReplayMatcher: Sendable {
    /// The same text.
    case exact
    /// The same JSON value once the named object fields are removed at every depth (a time, a
    /// random id); a text that is not JSON is compared exactly.
    case jsonIgnoring(Set<String>)
    /// The recorded text is a regular expression that the whole of the client's must match.
    case regularExpression
    /// The test's own comparison: `(recorded, received)`, true when they match.
    case custom(@Sendable (_ recorded: Cassette.Message, _ received: Cassette.Message) -> Bool)

    /// Whether `received` matches `recorded`.
    func matches(_ recorded: Cassette.Message, _ received: Cassette.Message) -> Bool {
        switch (self, recorded, received) {
        case (.custom(let matches), _, _):
            return matches(recorded, received)
        case (.exact, _, _), (_, .binary, _), (_, _, .binary):
            return recorded == received
        case (.jsonIgnoring(let fields), .text(let recorded), .text(let received)):
            guard let left = JSONValue(recorded), let right = JSONValue(received) else { return recorded == received }
            return left.removing(fields) == right.removing(fields)
        case (.regularExpression, .text(let pattern), .text(let received)):
            guard let expression = try? Regex(pattern) else { return pattern == received }
            return (try? expression.wholeMatch(in: received)) != nil
        }
    }
}

/// A client's message that the recording did not expect, in strict mode: where, and both sides.
public struct ReplayMismatch: Error, Sendable, Hashable, CustomStringConvertible {
    /// The session's number in the cassette (from 1), and its path.
    public var session: Int
    public var path: String
    /// The step of the session (from 1) the client's message was compared with; 0 for an SSE
    /// session's request (its method and body).
    public var step: Int
    /// What the recording has there: `client text "hello"`, or why none was expected.
    public var recorded: String
    /// What the client sent: `client text "hullo"`.
    public var received: String

    public var description: String {
        "replay mismatch in session \(session) (\(path)), step \(step):\n  recorded: \(recorded)\n  received: \(received)"
    }

    /// How a message is shown in a report: its kind and content, a long one cut at 200 characters.
    static func show(_ message: Cassette.Message) -> String {
        switch message {
        case .text(let text):
            let shown = text.count > 200 ? String(text.prefix(200)) + "… (\(text.utf8.count) bytes)" : text
            return "client text \(shown.debugDescription)"
        case .binary(let data):
            let hex = data.prefix(32).map { String(format: "%02x", $0) }.joined()
            return "client binary of \(data.count) bytes (\(hex)\(data.count > 32 ? "…" : ""))"
        }
    }
}
