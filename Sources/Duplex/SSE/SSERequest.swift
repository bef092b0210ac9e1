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
    public var url: URL
    /// Extra request headers.
    public var additionalHeaders: [String: String]

    /// Creates a request.
    public init(url: URL, additionalHeaders: [String: String] = [:]) {
        self.url = url
        self.additionalHeaders = additionalHeaders
    }

    /// Creates a request from a URL string.
    /// - Throws: ``SSEError`` with code ``SSEError/Code/invalidURL``.
    public init(url: String, additionalHeaders: [String: String] = [:]) throws {
        guard let parsed = URL(string: url) else { throw SSEError(.invalidURL, "not a URL: \(url)") }
        self.init(url: parsed, additionalHeaders: additionalHeaders)
        try validate()
    }

    func validate() throws(SSEError) {
        guard let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https" else {
            throw SSEError(.invalidURL, "the URL scheme must be http or https: \(url.absoluteString)")
        }
        guard let host = url.host, !host.isEmpty else {
            throw SSEError(.invalidURL, "the URL has no host: \(url.absoluteString)")
        }
    }
}
