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
    public var url: URL
    /// Subprotocols to offer in `Sec-WebSocket-Protocol`, in order of preference.
    public var protocols: [String]
    /// Extra headers for the handshake request, such as `Authorization`.
    public var additionalHeaders: [String: String]

    /// Creates a request.
    public init(url: URL, protocols: [String] = [], additionalHeaders: [String: String] = [:]) {
        self.url = url
        self.protocols = protocols
        self.additionalHeaders = additionalHeaders
    }

    /// Creates a request from a URL string.
    /// - Throws: ``WebSocketError`` with code ``WebSocketError/Code/invalidURL`` for a malformed URL.
    public init(url: String, protocols: [String] = [], additionalHeaders: [String: String] = [:]) throws {
        guard let parsed = URL(string: url) else {
            throw WebSocketError(.invalidURL, "not a URL: \(url)")
        }
        self.init(url: parsed, protocols: protocols, additionalHeaders: additionalHeaders)
        _ = try endpoint()
    }

    /// Where to connect, read from the URL.
    struct Endpoint: Sendable, Equatable {
        var host: String
        var port: Int
        var secure: Bool
        /// Path and query, as sent in the request line.
        var target: String
        /// The Host header.
        var hostHeader: String
    }

    func endpoint() throws -> Endpoint {
        let scheme = url.scheme?.lowercased() ?? ""
        let secure: Bool
        switch scheme {
        case "ws", "http": secure = false
        case "wss", "https": secure = true
        default: throw WebSocketError(.invalidURL, "the URL scheme must be ws or wss (got \(scheme.isEmpty ? "none" : scheme)): \(url.absoluteString)")
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
