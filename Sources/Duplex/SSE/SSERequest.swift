public import Foundation
public import DuplexSchema

/// What an SSE client sends: the URL, the method and body, extra request headers, and how the
/// stream finishes.
///
/// `Accept: text/event-stream` and `Cache-Control: no-cache` are always sent, and
/// `Last-Event-ID` when the stream has one.
///
/// A `GET` stream is an event feed: it reconnects when it ends or drops, resuming with
/// `Last-Event-ID`. A stream opened by any other method is the answer to one request (a
/// completion, a search, an export): once the server has answered it, it is never sent again
/// unless ``isResumable`` says it may be, and a clean end of the response is its finish. A
/// ``terminalEvent`` (for example `data: [DONE]`) finishes a stream of either kind.
///
/// ```swift
/// struct Prompt: Encodable { var prompt: String }
/// let request = try SSERequest(
///     url: URL(string: "https://api.example.com/v1/complete")!,
///     json: Prompt(prompt: "hi"),
///     additionalHeaders: ["Authorization": "Bearer token"],
///     terminalEvent: .done
/// )
/// let sse = ServerSentEventManager(request: request)
/// ```
public struct SSERequest: Sendable, Hashable {
    /// An `http://` or `https://` URL.
    public var url: URL {
        didSet { malformedURL = nil }
    }
    /// The request method. Default ``Method/get``.
    public var method: Method
    /// The request body, sent with `Content-Length`; nil sends none. A `GET` request carries
    /// none: `connect()` refuses one with ``SSEError/Code/invalidRequest``. Set `Content-Type` in
    /// ``additionalHeaders`` (``init(url:method:json:encoder:additionalHeaders:terminalEvent:)``
    /// does it for JSON).
    public var body: Data?
    /// Extra request headers.
    public var additionalHeaders: [String: String]
    /// The event that finishes the stream: it is delivered, then the stream ends for good, with
    /// no reconnection, as a normal finish. Default nil: only the server ends the stream.
    public var terminalEvent: SSETerminalEvent?
    /// Whether the request may be sent again after the server answered it (the stream opened,
    /// then ended or dropped): true for `GET`, whose stream resumes with `Last-Event-ID`; false
    /// for every other method unless set, since sending a `POST` again may repeat what it does.
    /// Set it for a server that resumes a stream from `Last-Event-ID` (sent on the re-send).
    /// A connection that failed before any answer is retried per the ``RetryPolicy`` either way.
    /// The manager's request decides it; ``ServerSentEventManager/prepareRequest`` does not.
    public var isResumable: Bool {
        get { resumable ?? (method == .get) }
        set { resumable = newValue }
    }
    /// ``isResumable`` when set; nil follows the method.
    private var resumable: Bool?
    /// The string given to the string initialiser when it was not a URL: `connect()` reports it.
    private var malformedURL: String?

    /// Creates a request.
    /// - Parameters:
    ///   - url: an `http://` or `https://` URL.
    ///   - method: the method; default `GET`.
    ///   - body: the body, for a method other than `GET`.
    ///   - additionalHeaders: extra request headers.
    ///   - terminalEvent: the event that finishes the stream, if any.
    public init(
        url: URL,
        method: Method = .get,
        body: Data? = nil,
        additionalHeaders: [String: String] = [:],
        terminalEvent: SSETerminalEvent? = nil
    ) {
        self.url = url
        self.method = method
        self.body = body
        self.additionalHeaders = additionalHeaders
        self.terminalEvent = terminalEvent
    }

    /// Creates a request whose body is `json` encoded as JSON, with
    /// `Content-Type: application/json` unless `additionalHeaders` names a content type.
    /// - Parameters:
    ///   - url: an `http://` or `https://` URL.
    ///   - method: the method; default `POST`.
    ///   - json: the body's value.
    ///   - encoder: how to encode it.
    ///   - additionalHeaders: extra request headers.
    ///   - terminalEvent: the event that finishes the stream, if any.
    /// - Throws: what `encoder` throws.
    public init(
        url: URL,
        method: Method = .post,
        json: some Encodable,
        encoder: JSONEncoder = JSONEncoder(),
        additionalHeaders: [String: String] = [:],
        terminalEvent: SSETerminalEvent? = nil
    ) throws {
        var headers = additionalHeaders
        if !headers.keys.contains(where: { $0.lowercased() == "content-type" }) {
            headers["Content-Type"] = "application/json"
        }
        self.init(url: url, method: method, body: try encoder.encode(json), additionalHeaders: headers, terminalEvent: terminalEvent)
    }

    /// Creates a request from a URL string, as seed code writes it. It does not throw: a
    /// malformed URL, or one that is not `http://` or `https://`, makes `connect()` throw
    /// ``SSEError`` with code ``SSEError/Code/invalidURL``.
    public init(url: String, additionalHeaders: [String: String] = [:]) {
        self.init(url: URL(string: url) ?? WebSocketRequest.placeholder, additionalHeaders: additionalHeaders)
        if URL(string: url) == nil { malformedURL = url }
    }

    /// Creates a request from a URL string with headers as seed 004 writes them:
    /// `[.authorization(.bearer("token"))]`.
    public init(url: String, additionalHeaders: [HTTPHeader]?) {
        self.init(url: url, additionalHeaders: additionalHeaders?.dictionary ?? [:])
    }

    /// Seed 004's spelling, with a lowercase `h`.
    @available(*, deprecated, renamed: "init(url:additionalHeaders:)")
    public init(url: String, additionalheaders: [HTTPHeader]?) {
        self.init(url: url, additionalHeaders: additionalheaders)
    }

    func validate() throws(SSEError) {
        if let malformedURL { throw SSEError(.invalidURL, "not a URL: \(malformedURL.prefix(200).debugDescription)") }
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw SSEError(.invalidURL, "the URL scheme must be http or https: \(url.absoluteString)")
        }
        guard let host = url.host, !host.isEmpty else {
            throw SSEError(.invalidURL, "the URL has no host: \(url.absoluteString)")
        }
        if let problem = method.problem { throw SSEError(.invalidRequest, problem) }
        if method == .get, body != nil {
            throw SSEError(.invalidRequest, "a GET request carries no body: use POST (or another method) to send one")
        }
    }
}

extension SSERequest {
    /// An HTTP request method. Methods are case-sensitive: ``post`` is `POST`.
    public struct Method: Sendable, Hashable, CustomStringConvertible {
        /// The method as sent.
        public let rawValue: String

        /// A method as sent on the wire. `connect()` refuses one that is not an HTTP token, and
        /// `HEAD`, `CONNECT` and `TRACE`, whose answers carry no event stream, with
        /// ``SSEError/Code/invalidRequest``.
        public init(_ rawValue: String) {
            self.rawValue = rawValue
        }

        /// `GET`: an event feed, resumed with `Last-Event-ID`.
        public static let get = Method("GET")
        /// `POST`: a request whose answer is a stream.
        public static let post = Method("POST")
        /// `PUT`.
        public static let put = Method("PUT")
        /// `PATCH`.
        public static let patch = Method("PATCH")
        /// `DELETE`.
        public static let delete = Method("DELETE")

        public var description: String { rawValue }

        /// Why the method cannot be sent, or nil.
        var problem: String? {
            if !HTTPToken.isToken(rawValue) {
                return "the method \(String(rawValue.prefix(40)).debugDescription) is not an HTTP token"
            }
            if ["HEAD", "CONNECT", "TRACE"].contains(rawValue.uppercased()) {
                return "a \(rawValue.uppercased()) request has no event stream for an answer"
            }
            return nil
        }
    }
}

/// The event that finishes a stream (``SSERequest/terminalEvent``): OpenAI-style APIs end with
/// `data: [DONE]` (``done``), others with an event type of their own.
public struct SSETerminalEvent: Sendable, Hashable, CustomStringConvertible {
    private enum Match: Hashable {
        case data(String)
        case event(String)
    }

    private let match: Match

    private init(_ match: Match) {
        self.match = match
    }

    /// An event whose data is exactly `data`.
    public static func data(_ data: String) -> SSETerminalEvent { SSETerminalEvent(.data(data)) }

    /// An event of type `type` (its `event:` field).
    public static func event(_ type: String) -> SSETerminalEvent { SSETerminalEvent(.event(type)) }

    /// `data: [DONE]`, as OpenAI-style streaming APIs end.
    public static var done: SSETerminalEvent { .data("[DONE]") }

    /// Whether `event` is the terminal event.
    public func matches(_ event: ServerSentEvent) -> Bool {
        switch match {
        case .data(let data): event.data == data
        case .event(let type): (event.event ?? "message") == type
        }
    }

    public var description: String {
        switch match {
        case .data(let data): "data: \(data)"
        case .event(let type): "event: \(type)"
        }
    }
}
