import Foundation

/// A proxy that `ws://`, `wss://`, `http://` and `https://` connections go through: an HTTP
/// proxy (a `CONNECT` tunnel, with a user and password if the proxy asks for them), a SOCKS5
/// proxy, or whatever the environment says, as curl reads it.
///
/// ```swift
/// configuration.proxy = try Proxy(url: "http://user:secret@proxy.example:3128")
/// configuration.proxy = .socks5(host: "127.0.0.1", port: 1080)
/// configuration.proxy = .environment    // HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY
/// ```
///
/// Off by default. The TLS of a `wss://` or `https://` connection runs through the tunnel, end to
/// end with the server; the proxy sees only the host and port. A proxy that refuses fails the
/// connection with `proxyFailed` and the proxy's status (407, 403, 502, …).
public struct Proxy: Sendable, Hashable {
    enum Value: Sendable, Hashable {
        case fixed(Route)
        case environment
    }

    /// Where one connection goes.
    enum Route: Sendable, Hashable {
        case http(host: String, port: Int, username: String?, password: String?)
        case socks5(host: String, port: Int)

        /// The proxy's address.
        var address: (host: String, port: Int) {
            switch self {
            case .http(let host, let port, _, _), .socks5(let host, let port): (host, port)
            }
        }
    }

    let value: Value

    /// An HTTP proxy: every connection is a `CONNECT host:port` tunnel through it, with basic
    /// authentication when `username` is given.
    public static func http(host: String, port: Int, username: String? = nil, password: String? = nil) -> Proxy {
        Proxy(value: .fixed(.http(host: host, port: port, username: username, password: password)))
    }

    /// A SOCKS5 proxy, without authentication (the proxy resolves the host name).
    public static func socks5(host: String, port: Int) -> Proxy {
        Proxy(value: .fixed(.socks5(host: host, port: port)))
    }

    /// The proxy the environment names for each URL, as curl reads it: `https_proxy` or
    /// `HTTPS_PROXY` for `wss://` and `https://`, `http_proxy` or `HTTP_PROXY` for `ws://` and
    /// `http://`, else `all_proxy` or `ALL_PROXY`; none for hosts `no_proxy` or `NO_PROXY`
    /// lists (comma-separated names, each also matching its subdomains; `*` for all).
    public static let environment = Proxy(value: .environment)

    /// A proxy from its URL: `http://[user:password@]host[:port]` (port 1080 by default, as
    /// curl's) or `socks5://host[:port]` (`socks5h://` too).
    /// - Throws: ``WebSocketError`` with code ``WebSocketError/Code/invalidURL`` for another
    ///   scheme (a TLS proxy, `https://`, is not supported), no host, or a bad port.
    public init(url: String) throws {
        self.init(value: .fixed(try Self.route(url)))
    }

    private init(value: Value) {
        self.value = value
    }

    static func route(_ text: String) throws -> Route {
        let withScheme = text.contains("://") ? text : "http://" + text
        guard let components = URLComponents(string: withScheme), let scheme = components.scheme?.lowercased() else {
            throw WebSocketError(.invalidURL, "not a proxy URL: \(text.prefix(200).debugDescription)")
        }
        guard var host = components.host, !host.isEmpty else {
            throw WebSocketError(.invalidURL, "the proxy URL has no host: \(text.prefix(200).debugDescription)")
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let port = components.port ?? 1080
        guard (1...65535).contains(port) else { throw WebSocketError(.invalidURL, "the proxy port is out of range: \(port)") }
        switch scheme {
        case "http":
            return .http(
                host: host, port: port, username: components.user?.removingPercentEncoding, password: components.password?.removingPercentEncoding)
        case "socks5", "socks5h":
            guard components.user == nil else {
                throw WebSocketError(.invalidURL, "SOCKS5 proxies with a user and password are not supported (NIOSOCKS speaks no authentication)")
            }
            return .socks5(host: host, port: port)
        default:
            throw WebSocketError(.invalidURL, "proxy scheme \(scheme.debugDescription) is not supported: use http:// (CONNECT) or socks5://")
        }
    }

    /// The route for a connection to `host`, or nil to connect directly.
    /// - Throws: ``WebSocketError`` with code ``WebSocketError/Code/invalidURL`` for a malformed
    ///   proxy variable.
    func route(secure: Bool, host: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Route? {
        switch value {
        case .fixed(let route):
            return route
        case .environment:
            func variable(_ name: String) -> String? {
                [environment[name.lowercased()], environment[name.uppercased()]].compactMap { $0 }.first { !$0.isEmpty }
            }
            if let noProxy = variable("no_proxy"), Self.bypasses(host: host, noProxy: noProxy) { return nil }
            guard let proxy = variable(secure ? "https_proxy" : "http_proxy") ?? variable("all_proxy") else { return nil }
            return try Self.route(proxy)
        }
    }

    /// Whether `noProxy` (curl's `NO_PROXY`) lists `host`.
    static func bypasses(host: String, noProxy: String) -> Bool {
        let host = host.lowercased()
        for entry in noProxy.split(separator: ",") {
            var name = entry.trimmingCharacters(in: .whitespaces).lowercased()
            if name == "*" { return true }
            if name.hasPrefix("["), let end = name.firstIndex(of: "]") {
                name = String(name[name.index(after: name.startIndex)..<end])
            } else if name.filter({ $0 == ":" }).count == 1, let colon = name.firstIndex(of: ":") {
                name = String(name[..<colon])  // host:port: the port is not compared
            }
            if name.hasPrefix(".") { name.removeFirst() }
            guard !name.isEmpty else { continue }
            if host == name || host.hasSuffix("." + name) { return true }
        }
        return false
    }
}
