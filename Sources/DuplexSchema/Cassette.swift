public import Foundation

/// A recording of sessions with a server, WebSocket connections and Server-Sent-Event streams, to
/// be served again by a replay server (`duplex replay`, or `withReplayServer` in DuplexTesting).
///
/// A session holds the request that opened it and, in order, what each side did and when: the
/// messages each way, the SSE events, and how it ended. A cassette is stored as JSON lines
/// (``encoded()``, ``init(jsonLines:)``), one object per line, so a recorder can append sessions
/// as they happen; the format is in `docs/cassettes.md`. One can be built in code too:
///
/// ```swift
/// let cassette = Cassette(sessions: [
///     .webSocket("/echo", steps: [
///         .client(.text("hello")),
///         .server(.text("hello"), at: .milliseconds(5)),
///         .close(code: 1000, by: .client, at: .milliseconds(10)),
///     ]),
///     .eventStream("/events", steps: [
///         .event(ServerSentEvent(id: "1", event: "tick", data: "1")),
///         .event(ServerSentEvent(id: "2", event: "tick", data: "2"), at: .seconds(1)),
///     ]),
/// ])
/// ```
public struct Cassette: Sendable, Hashable {
    /// The version of the format ``encoded()`` writes; ``init(jsonLines:)`` reads this one only.
    public static let formatVersion = 1

    /// The sessions, in the order they began.
    public var sessions: [Session]

    /// A cassette of `sessions`.
    public init(sessions: [Session] = []) {
        self.sessions = sessions
    }

    /// One connection or stream: the request, and what each side did.
    public struct Session: Sendable, Hashable {
        /// What the session was.
        public enum Kind: String, Sendable, Hashable, Codable {
            /// A WebSocket connection.
            case webSocket = "websocket"
            /// A `text/event-stream` response (Server-Sent Events).
            case eventStream = "sse"
        }

        /// A WebSocket connection or an SSE stream.
        public var kind: Kind
        /// The request's path, from `/`; the replay server serves the session there.
        public var path: String
        /// The request's query, without `?`, if it had one.
        public var query: String?
        /// The request's header fields in order, as recorded (secrets replaced).
        public var headers: [Header]
        /// The subprotocol the server chose (`Sec-WebSocket-Protocol`), if any.
        public var subprotocol: String?
        /// The extensions the server agreed to (`Sec-WebSocket-Extensions`), as sent, if any.
        public var extensions: String?
        /// An SSE session's request method when it was not `GET` (a stream that answers a
        /// `POST`); nil for `GET`.
        public var method: String?
        /// An SSE session's request body, if it had one.
        public var body: Data?
        /// What happened, in order.
        public var steps: [Step]

        /// A session of `kind` at `path`.
        public init(
            kind: Kind,
            path: String,
            query: String? = nil,
            headers: [Header] = [],
            subprotocol: String? = nil,
            extensions: String? = nil,
            method: String? = nil,
            body: Data? = nil,
            steps: [Step] = []
        ) {
            self.kind = kind
            self.path = path
            self.query = query
            self.headers = headers
            self.subprotocol = subprotocol
            self.extensions = extensions
            self.method = method
            self.body = body
            self.steps = steps
        }

        /// A WebSocket session at `path`.
        public static func webSocket(_ path: String, subprotocol: String? = nil, steps: [Step]) -> Session {
            Session(kind: .webSocket, path: path, subprotocol: subprotocol, steps: steps)
        }

        /// An SSE session at `path`: the answer to a `GET`, or to `method` with `body`.
        public static func eventStream(_ path: String, method: String? = nil, body: Data? = nil, steps: [Step]) -> Session {
            Session(kind: .eventStream, path: path, method: method, body: body, steps: steps)
        }
    }

    /// A request header field.
    public struct Header: Sendable, Hashable {
        /// The field's name, as sent.
        public var name: String
        /// The field's value, or what replaced a secret.
        public var value: String

        /// A header field.
        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    /// Which side of a session did something.
    public enum Side: String, Sendable, Hashable, Codable {
        /// The client: the side that connected.
        case client
        /// The server.
        case server
    }

    /// A WebSocket message's content.
    public enum Message: Sendable, Hashable {
        /// A text message.
        case text(String)
        /// A binary message.
        case binary(Data)
    }

    /// What one side did, and when, counted from the session's start.
    public struct Step: Sendable, Hashable {
        /// What happened.
        public enum Action: Sendable, Hashable {
            /// A WebSocket message from `side`.
            case message(Side, Message)
            /// An SSE event from the server.
            case event(ServerSentEvent)
            /// A close frame from `side`: its code (none when the frame had none) and reason.
            case close(Side, code: UInt16?, reason: String)
            /// `side` ended the connection (TCP, or the SSE response) without a close frame.
            case disconnect(Side)
            /// From here on the server answers the client's pings (true) or withholds its pongs
            /// (false), so that a client's keep-alive fails as it did against the recorded server.
            /// A WebSocket session's, from the server. A silence needs no step: it is the time
            /// between two steps, replayed as recorded (scaled by the replay's speed).
            case pongs(Bool)
        }

        /// How long after the session began.
        public var at: Duration
        /// What happened.
        public var action: Action

        /// A step.
        public init(at: Duration, _ action: Action) {
            self.at = at
            self.action = action
        }

        /// The client sent `message`.
        public static func client(_ message: Message, at: Duration = .zero) -> Step {
            Step(at: at, .message(.client, message))
        }

        /// The server sent `message`.
        public static func server(_ message: Message, at: Duration = .zero) -> Step {
            Step(at: at, .message(.server, message))
        }

        /// The server sent an SSE event.
        public static func event(_ event: ServerSentEvent, at: Duration = .zero) -> Step {
            Step(at: at, .event(event))
        }

        /// `side` sent a close frame.
        public static func close(code: UInt16? = 1000, reason: String = "", by side: Side, at: Duration = .zero) -> Step {
            Step(at: at, .close(side, code: code, reason: reason))
        }

        /// `side` ended the connection without a close frame.
        public static func disconnect(by side: Side, at: Duration = .zero) -> Step {
            Step(at: at, .disconnect(side))
        }

        /// From `at` on, the server answers (true) or withholds (false) the client's pings.
        public static func pongs(_ answers: Bool, at: Duration = .zero) -> Step {
            Step(at: at, .pongs(answers))
        }
    }

    /// A cassette file that cannot be read: the line (from 1) and what is wrong with it.
    public struct FormatError: Error, Hashable, CustomStringConvertible, Sendable {
        /// The line, from 1.
        public var line: Int
        /// What is wrong.
        public var message: String

        /// An error on `line`.
        public init(line: Int, _ message: String) {
            self.line = line
            self.message = message
        }

        public var description: String { "cassette line \(line): \(message)" }
    }
}
