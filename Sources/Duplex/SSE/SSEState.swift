public import DuplexSchema
public import Foundation

/// The state of a ``ServerSentEventManager``.
public enum SSEState: Sendable, Equatable, CustomStringConvertible {
    /// Created, never connected.
    case notConnected
    /// Opening the stream (the first time, or again).
    case connecting
    /// The stream is open.
    case connected
    /// The stream is closed, and why. With retries, `connecting` may follow.
    case disconnected(SSEDisconnectReason)

    public var description: String {
        switch self {
        case .notConnected: "notConnected"
        case .connecting: "connecting"
        case .connected: "connected"
        case .disconnected(let reason): "disconnected(\(reason))"
        }
    }
}

/// Why a ``ServerSentEventManager`` is disconnected.
public enum SSEDisconnectReason: Sendable, Equatable, CustomStringConvertible {
    /// The server ended the stream cleanly, or the stream finished: its
    /// ``SSERequest/terminalEvent`` arrived, or the answer to a request that is not resumable
    /// ended (``ServerSentEventManager/hasFinished`` tells which, and no reconnection follows).
    case streamEnded
    /// The stream failed, or could not be opened; ``SSEError`` says how.
    case streamError(SSEError)
    /// ``ServerSentEventManager/disconnect()`` was called.
    case manuallyDisconnected
    /// ``ServerSentEventManager/terminate()`` was called.
    case terminated

    public var description: String {
        switch self {
        case .streamEnded: "streamEnded"
        case .streamError(let error): "streamError(\(error))"
        case .manuallyDisconnected: "manuallyDisconnected"
        case .terminated: "terminated"
        }
    }
}

/// An error of the SSE client, with a readable description.
public struct SSEError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The kind of error.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let value: String
        private init(_ value: String) { self.value = value }

        /// The URL is not an http:// or https:// URL with a host.
        public static let invalidURL = Code("invalidURL")
        /// An extra request header cannot be sent: its name is not an HTTP token, or its value
        /// holds CR, LF, NUL or another control character. Nothing is sent; not retried.
        public static let invalidHeader = Code("invalidHeader")
        /// The method cannot be sent (not an HTTP token, or `HEAD`, `CONNECT`, `TRACE`), or a
        /// `GET` request has a body. Nothing is sent; not retried.
        public static let invalidRequest = Code("invalidRequest")
        /// The stream finished (``ServerSentEventManager/hasFinished``): `connect()` does not send
        /// the request again. A new manager does.
        public static let finished = Code("finished")
        /// The server answered 204 No Content: it asks the client to stop. Not retried.
        public static let noContent = Code("noContent")
        /// The server answered with a status other than 2xx; see ``status``, and ``response``
        /// for its body. Not retried, unless ``SSEConfiguration/retryOnServerErrors`` covers it.
        /// Also a redirect that cannot be followed: no usable `Location`, a cycle, or more than 5.
        public static let badStatus = Code("badStatus")
        /// The response is not `text/event-stream` (``response`` has its body). Not retried.
        public static let badContentType = Code("badContentType")
        /// No bytes arrived, not even a comment, for the read timeout: the connection is dead.
        public static let readTimeout = Code("readTimeout")
        /// The connection could not be made, or broke (also before the response's end: a drop).
        public static let connectionFailed = Code("connectionFailed")
        /// TLS could not be set up or the server's certificate was not trusted.
        public static let tlsFailed = Code("tlsFailed")
        /// The proxy (``SSEConfiguration/proxy``) refused the tunnel or could not be reached. As
        /// with ``tlsFailed``, the stream is not retried: the settings need changing.
        public static let proxyFailed = Code("proxyFailed")
        /// A line or event was larger than the parser allows.
        public static let eventTooLarge = Code("eventTooLarge")
        /// Retries stopped after this many attempts.
        public static let retriesExhausted = Code("retriesExhausted")
        /// ``ServerSentEventManager/terminate()`` was called.
        public static let terminated = Code("terminated")
        /// ``ServerSentEventManager/disconnect()`` was called while connecting.
        public static let disconnected = Code("disconnected")

        public var description: String { value }
    }

    /// The kind of error.
    public var code: Code
    /// What happened, for people.
    public var message: String
    /// For ``Code/badStatus``: the HTTP status; for ``Code/proxyFailed``: the proxy's, if it
    /// answered with one.
    public var status: Int?
    /// For ``Code/badStatus`` and ``Code/badContentType``: the server's answer, with its body
    /// (bounded), so that a caller can show the API's own error message.
    public var response: SSEErrorResponse?

    /// Creates an error.
    public init(_ code: Code, _ message: String, status: Int? = nil, response: SSEErrorResponse? = nil) {
        self.code = code
        self.message = message
        self.status = status
        self.response = response
    }

    public var description: String { "\(code): \(message)" }
}

/// A server's answer that did not open a stream (a status other than 2xx, or another content
/// type): what a caller needs to show the API's own error and to wait as it asks.
public struct SSEErrorResponse: Sendable, Hashable {
    /// The most of a body kept: 64 KiB. What follows is not read.
    public static let bodyLimit = 64 * 1024

    /// The HTTP status.
    public var status: Int
    /// The `Retry-After` header, as sent, if any.
    public var retryAfter: String?
    /// The `Content-Type` header, as sent, if any.
    public var contentType: String?
    /// The body, up to ``bodyLimit`` bytes.
    public var body: Data
    /// Whether the body was longer than ``bodyLimit`` (or did not end within the connect
    /// timeout), and ``body`` is its start.
    public var bodyTruncated: Bool
    /// Every header of the answer, in order (``retryAfter`` and ``contentType`` among them).
    public var headers: [HTTPHeader] = []

    /// Creates an answer.
    public init(status: Int, retryAfter: String? = nil, contentType: String? = nil, body: Data = Data(), bodyTruncated: Bool = false) {
        self.status = status
        self.retryAfter = retryAfter
        self.contentType = contentType
        self.body = body
        self.bodyTruncated = bodyTruncated
    }

    /// The body as UTF-8 text (invalid bytes replaced).
    public var text: String { String(decoding: body, as: UTF8.self) }
}

/// An event whose data could not be decoded as the type asked for
/// (``ServerSentEventManager/events(decoding:decoder:buffering:)``, ``DuplexSchema/ServerSentEvent/decode(_:decoder:)``).
public struct SSEDecodingError: Error, Sendable, CustomStringConvertible {
    /// The event.
    public var event: ServerSentEvent
    /// The type asked for.
    public var type: String
    /// What the decoder said.
    public var underlying: any Error

    /// Creates an error.
    public init(event: ServerSentEvent, type: String, underlying: any Error) {
        self.event = event
        self.type = type
        self.underlying = underlying
    }

    public var description: String {
        "the data of event \(event.id.map { "id \(String($0.prefix(40)).debugDescription)" } ?? "(no id)") is not a \(type): \(underlying); data: \(String(event.data.prefix(200)).debugDescription)"
    }
}
