public import Foundation

/// What an SSE client connects to: the URL and extra request headers.
///
/// `Accept: text/event-stream` and `Cache-Control: no-cache` are always sent, and
/// `Last-Event-ID` when the stream has one.
///
/// ```swift
/// let request = SSERequest(url: URL(string: "https://example.com/events")!,
///                          additionalHeaders: ["Authorization": "Bearer token"])
/// let sse = ServerSentEventManager(request: request)
/// ```
public struct SSERequest: Sendable, Hashable {
    /// An `http://` or `https://` URL.
    public var url: URL {
        didSet { malformedURL = nil }
    }
    /// Extra request headers.
    public var additionalHeaders: [String: String]
    /// The string given to the string initialiser when it was not a URL: `connect()` reports it.
    private var malformedURL: String?

    /// Creates a request.
    public init(url: URL, additionalHeaders: [String: String] = [:]) {
        self.url = url
        self.additionalHeaders = additionalHeaders
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
    }
}
