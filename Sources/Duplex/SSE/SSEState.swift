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
    /// The server ended the stream.
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
        /// The server answered 204 No Content: it asks the client to stop. Not retried.
        public static let noContent = Code("noContent")
        /// The server answered with a status other than 2xx; see ``status``. Not retried,
        /// unless ``SSEConfiguration/retryOnServerErrors`` covers it. Also a redirect that cannot
        /// be followed: no usable `Location`, a cycle, or more than 5.
        public static let badStatus = Code("badStatus")
        /// The response is not `text/event-stream`. Not retried.
        public static let badContentType = Code("badContentType")
        /// No bytes arrived, not even a comment, for the read timeout: the connection is dead.
        public static let readTimeout = Code("readTimeout")
        /// The connection could not be made, or broke.
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

    public init(_ code: Code, _ message: String, status: Int? = nil) {
        self.code = code
        self.message = message
        self.status = status
    }

    public var description: String { "\(code): \(message)" }
}
