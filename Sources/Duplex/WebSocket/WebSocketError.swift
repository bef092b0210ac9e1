public import DuplexSchema

/// An error of the WebSocket client, with a readable description.
///
/// Compare with the static members: `if error.code == .notConnected { … }`.
public struct WebSocketError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The kind of error.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private let value: String
        private init(_ value: String) { self.value = value }

        /// The URL is not a ws:// or wss:// URL with a host.
        public static let invalidURL = Code("invalidURL")
        /// An extra request header cannot be sent: its name is not an HTTP token, or its value
        /// holds CR, LF, NUL or another control character. Nothing is sent.
        public static let invalidHeader = Code("invalidHeader")
        /// The socket is not connected, and is not reconnecting: a send cannot go anywhere.
        public static let notConnected = Code("notConnected")
        /// ``WebSocket/terminate()`` was called; the socket cannot be used again.
        public static let terminated = Code("terminated")
        /// No connection was made within the connect timeout.
        public static let connectTimeout = Code("connectTimeout")
        /// The TCP connection could not be made (refused, unreachable, DNS failure).
        public static let connectionFailed = Code("connectionFailed")
        /// The TLS handshake failed, for example because the certificate is not trusted.
        public static let tlsFailed = Code("tlsFailed")
        /// The proxy (``WebSocketConfiguration/proxy``) refused the tunnel or could not open it;
        /// ``status`` holds its HTTP status (407, 403, 502, …) when it answered one.
        public static let proxyFailed = Code("proxyFailed")
        /// The server answered the handshake with a status other than 101; see ``status``.
        public static let upgradeRejected = Code("upgradeRejected")
        /// The server chose a subprotocol the client did not offer.
        public static let unexpectedSubprotocol = Code("unexpectedSubprotocol")
        /// The server answered with a `Sec-WebSocket-Extensions` the client did not offer
        /// (RFC 6455 section 4.1: the client must fail the connection).
        public static let unexpectedExtension = Code("unexpectedExtension")
        /// The server's handshake response broke RFC 6455 or HTTP: a wrong `Sec-WebSocket-Accept`,
        /// a malformed response, or response headers over the size limit.
        public static let handshakeFailed = Code("handshakeFailed")
        /// The peer broke RFC 6455; ``closeCode`` says how.
        public static let protocolViolation = Code("protocolViolation")
        /// A message exceeded ``WebSocketConfiguration/maxMessageBytes``.
        public static let messageTooBig = Code("messageTooBig")
        /// The send queue used while reconnecting is full.
        public static let sendQueueFull = Code("sendQueueFull")
        /// `maxPingFailures` pings in a row went unanswered.
        public static let pingFailed = Code("pingFailed")
        /// The connection failed while sending or receiving.
        public static let connectionLost = Code("connectionLost")
        /// A frame could not be decoded as the typed channel's message type.
        public static let decodingFailed = Code("decodingFailed")
        /// The ``WebSocket/preamble`` threw, or waited for a message that did not come in time:
        /// the connection counts as a failed attempt.
        public static let preambleFailed = Code("preambleFailed")

        public var description: String { value }
    }

    /// The kind of error.
    public var code: Code
    /// What happened, for people.
    public var message: String
    /// For ``Code/upgradeRejected``: the HTTP status the server answered with; for
    /// ``Code/proxyFailed``: the proxy's.
    public var status: Int?
    /// For ``Code/protocolViolation`` and ``Code/messageTooBig``: the close code sent to the peer.
    public var closeCode: WebSocketCloseCode?
    /// For ``Code/upgradeRejected``: the wait the server's `Retry-After` asked for. A 429 or 503
    /// with one is retried after it (clamped to the reconnection strategy's bounds) rather than
    /// after the strategy's own delay.
    public var retryAfter: Duration?
    /// For ``Code/upgradeRejected``: the first bytes (at most 1 KiB) of the body the server
    /// answered with, as text: often why it refused. Nil when it sent none.
    public var body: String?
    /// For ``Code/upgradeRejected``: every header of the server's answer, in order (its
    /// `Retry-After` among them). Not compared by `==`: a `Date` would make two refusals of the
    /// same kind differ.
    public var headers: [HTTPHeader] = []

    /// How much of a refusal's body ``body`` keeps.
    static let bodyLimit = 1024

    public init(_ code: Code, _ message: String, status: Int? = nil, closeCode: WebSocketCloseCode? = nil, retryAfter: Duration? = nil) {
        self.code = code
        self.message = message
        self.status = status
        self.closeCode = closeCode
        self.retryAfter = retryAfter
    }

    public static func == (lhs: WebSocketError, rhs: WebSocketError) -> Bool {
        (lhs.code, lhs.message, lhs.status, lhs.closeCode, lhs.retryAfter, lhs.body) == (
            rhs.code, rhs.message, rhs.status, rhs.closeCode, rhs.retryAfter, rhs.body
        )
    }

    public var description: String {
        guard let body else { return "\(code): \(message)" }
        return "\(code): \(message); it said: \(body)"
    }
}
