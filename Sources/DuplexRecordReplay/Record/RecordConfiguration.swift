import DuplexHost
public import Duplex
public import Foundation
import DuplexSchema

/// What a recording server records, and from where (`DuplexServerConfiguration.record`, or `duplex record`).
///
/// The server then forwards every WebSocket connection and every `GET`, `POST`, `PUT`, `PATCH`
/// and `DELETE` (an SSE stream, with its method and body) to the same path and query on
/// ``upstream``, with the Duplex clients, and records each session in ``recorder``: the request
/// (its secrets replaced, its method and body), the subprotocol, every message each way
/// and every SSE event with its time, and how it ended. A client that offers several
/// subprotocols is answered with the first; the upstream is offered them all, and the one it
/// picks is recorded.
public struct RecordConfiguration: Sendable {
    /// The server recorded: `ws://`, `wss://`, `http://` or `https://` with a host and port,
    /// and a path that goes in front of each request's.
    public var upstream: URL
    /// Where the sessions go.
    public var recorder: CassetteRecorder
    /// Request headers whose values are recorded as `[redacted]`, by name in any case, besides
    /// `Authorization`, `Proxy-Authorization` and `Cookie`, which always are. They are still
    /// forwarded upstream.
    public var redact: Set<String>
    /// The certificates the upstream's TLS is checked against.
    public var tlsTrust: TLSTrust

    /// Records what `upstream` serves into `recorder`.
    public init(upstream: URL, recorder: CassetteRecorder, redact: Set<String> = [], tlsTrust: TLSTrust = .systemRoots) {
        self.upstream = upstream
        self.recorder = recorder
        self.redact = redact
        self.tlsTrust = tlsTrust
    }

    /// Headers that are never recorded in clear.
    static let secrets: Set<String> = ["authorization", "proxy-authorization", "cookie"]

    /// The upstream URL of a request's path and query, with `scheme` (`ws` or `http`, made
    /// secure when the upstream is); nil when they do not make a URL. The path and query are the
    /// client's, as sent: they are joined as text and parsed, never set on `URLComponents`,
    /// whose percent-encoded setters trap on bad percent-encoding (`/%ZZ`).
    func url(path: String, query: String?, webSocket: Bool) -> URL? {
        guard var components = URLComponents(url: upstream, resolvingAgainstBaseURL: false) else { return nil }
        let secure = ["wss", "https"].contains(components.scheme?.lowercased() ?? "")
        let base = components.percentEncodedPath.hasSuffix("/") ? String(components.percentEncodedPath.dropLast()) : components.percentEncodedPath
        components.scheme = webSocket ? (secure ? "wss" : "ws") : (secure ? "https" : "http")
        components.path = ""
        components.query = nil
        components.fragment = nil
        guard let origin = components.string, path.hasPrefix("/") else { return nil }
        return URL(string: origin + base + path + (query.map { "?" + $0 } ?? ""))
    }

    /// The upstream as a WebSocket URL: `ws` for `http`, `wss` for `https`.
    var webSocketUpstream: URL {
        guard var components = URLComponents(url: upstream, resolvingAgainstBaseURL: false) else { return upstream }
        let secure = ["wss", "https"].contains(components.scheme?.lowercased() ?? "")
        components.scheme = secure ? "wss" : "ws"
        return components.url ?? upstream
    }

    /// The request's headers as recorded: secrets and `redact` replaced, and the handshake's
    /// random `Sec-WebSocket-Key` left out.
    func recorded(_ headers: [(name: String, value: String)]) -> [DuplexSchema.Cassette.Header] {
        let hidden = Self.secrets.union(redact.map { $0.lowercased() })
        return headers.filter { $0.name.lowercased() != "sec-websocket-key" }.map {
            .init($0.name, hidden.contains($0.name.lowercased()) ? "[redacted]" : $0.value)
        }
    }

    /// The request's headers forwarded upstream: all but the hop's own.
    static func forwarded(_ headers: [(name: String, value: String)]) -> [String: String] {
        ForwardedHeaders.forwarded(headers)
    }
}
