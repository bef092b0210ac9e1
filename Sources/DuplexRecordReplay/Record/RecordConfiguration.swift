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

    /// The upstream with a WebSocket scheme (`ws`, `wss`) or an HTTP one (`http`, `https`), as
    /// secure as the configured one.
    func upstream(webSocket: Bool) -> URL {
        guard var components = URLComponents(url: upstream, resolvingAgainstBaseURL: false) else { return upstream }
        let secure = ["wss", "https"].contains(components.scheme?.lowercased() ?? "")
        components.scheme = webSocket ? (secure ? "wss" : "ws") : (secure ? "https" : "http")
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
}
