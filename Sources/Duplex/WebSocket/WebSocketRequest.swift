public import Foundation

/// What to connect to: the URL, the subprotocols to offer, and extra handshake headers.
///
/// ```swift
/// let request = WebSocketRequest(
///     url: URL(string: "wss://example.com/chat")!,
///     protocols: ["chat.v2"],
///     additionalHeaders: ["Authorization": "Bearer token"]
/// )
/// let socket = WebSocket(request: request)
/// ```
public struct WebSocketRequest: Sendable, Hashable {
    /// A `ws://` or `wss://` URL (`http://` and `https://` are accepted as aliases).
    public var url: URL {
        didSet { malformedURL = nil }
    }
    /// Subprotocols to offer in `Sec-WebSocket-Protocol`, in order of preference.
    public var protocols: [String]
    /// Extra headers for the handshake request, such as `Authorization`.
    public var additionalHeaders: [String: String]
    /// The string given to the string initialiser when it was not a
    /// URL: `connect()` reports it.
    private var malformedURL: String?

    /// Creates a request.
    public init(url: URL, protocols: [String] = [], additionalHeaders: [String: String] = [:]) {
        self.url = url
        self.protocols = protocols
        self.additionalHeaders = additionalHeaders
    }

    /// Creates a request from a URL string, as seed code writes it. It does not throw: a
    /// malformed URL, or one that is not `ws://` or `wss://`, makes `connect()` throw
    /// ``WebSocketError`` with code ``WebSocketError/Code/invalidURL``.
    public init(url: String, protocols: [String]? = nil, additionalHeaders: [String: String] = [:]) {
        self.init(url: URL(string: url) ?? Self.placeholder, protocols: protocols ?? [], additionalHeaders: additionalHeaders)
        if URL(string: url) == nil { malformedURL = url }
    }

    /// Creates a request from a URL string with headers as seed 004 writes them:
    /// `[.authorization(.bearer("token"))]`.
    public init(url: String, protocols: [String]? = nil, additionalHeaders: [HTTPHeader]?) {
        self.init(url: url, protocols: protocols, additionalHeaders: additionalHeaders?.dictionary ?? [:])
    }

    /// Seed 004's spelling, with a lowercase `h`.
    @available(*, deprecated, renamed: "init(url:protocols:additionalHeaders:)")
    public init(url: String, protocols: [String]? = nil, additionalheaders: [HTTPHeader]?) {
        self.init(url: url, protocols: protocols, additionalHeaders: additionalheaders)
    }

    /// Stands in for a URL string that did not parse; never connected to.
    static let placeholder = URL(string: "invalid:")!

    /// Where to connect, read from the URL.
    package struct Endpoint: Sendable, Equatable {
        package var host: String
        package var port: Int
        package var secure: Bool
        /// Path and query, as sent in the request line.
        package var target: String
        /// The Host header.
        package var hostHeader: String
    }

    func endpoint() throws -> Endpoint {
        if let malformedURL { throw WebSocketError(.invalidURL, "not a URL: \(malformedURL.prefix(200).debugDescription)") }
        let scheme = url.scheme?.lowercased() ?? ""
        let secure: Bool
        switch scheme {
        case "ws", "http": secure = false
        case "wss", "https": secure = true
        default:
            throw WebSocketError(.invalidURL, "the URL scheme must be ws or wss (got \(scheme.isEmpty ? "none" : scheme)): \(url.absoluteString)")
        }
        guard var host = url.host, !host.isEmpty else {
            throw WebSocketError(.invalidURL, "the URL has no host: \(url.absoluteString)")
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let port = url.port ?? (secure ? 443 : 80)
        guard (1...65535).contains(port) else {
            throw WebSocketError(.invalidURL, "the URL's port is out of range: \(url.absoluteString)")
        }
        let components = URLComponents(url: url, resolvingAgainstBaseURL: false)
        var target = components?.percentEncodedPath ?? "/"
        if target.isEmpty { target = "/" }
        if let query = components?.percentEncodedQuery { target += "?" + query }
        let shownHost = host.contains(":") ? "[\(host)]" : host
        let defaultPort = secure ? 443 : 80
        let hostHeader = port == defaultPort ? shownHost : "\(shownHost):\(port)"
        return Endpoint(host: host, port: port, secure: secure, target: target, hostHeader: hostHeader)
    }
}
