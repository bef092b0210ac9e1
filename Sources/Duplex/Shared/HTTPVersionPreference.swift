/// Which HTTP a client opens its connections over: ``WebSocketConfiguration/httpVersion`` and
/// ``SSEConfiguration/httpVersion``.
///
/// Over HTTP/2 the WebSockets (RFC 8441, extended CONNECT) and SSE streams of a process to one
/// origin (host, port, TLS trust and identity, and proxy alike) share one TCP and TLS
/// connection, each on a stream of its own. Ping, reconnection, backpressure, `Last-Event-ID`
/// and every stream guarantee are the same as over HTTP/1.1. When the server sends GOAWAY, the
/// streams on that connection run on until they end; new ones, and reconnections, open a new
/// connection. The connection closes when its last stream does.
///
/// HTTP/2 needs TLS (`wss://`, `https://`): a plain URL always uses HTTP/1.1 with
/// ``automatic``, and fails with ``http2``.
public enum HTTPVersionPreference: Sendable, Hashable {
    /// HTTP/1.1: one TCP connection per socket or stream (for a WebSocket, the `Upgrade`
    /// handshake). The WebSocket client's default.
    case http1
    /// HTTP/2 only: the connection must negotiate `h2` by ALPN and, for a WebSocket, the server
    /// must announce `SETTINGS_ENABLE_CONNECT_PROTOCOL`; otherwise the attempt fails
    /// (``WebSocketError/Code/handshakeFailed``, ``SSEError/Code/connectionFailed``), saying
    /// which.
    case http2
    /// HTTP/2 when ALPN chooses `h2` (and, for a WebSocket, the server announces extended
    /// CONNECT), otherwise HTTP/1.1, as browsers do. An origin found without it is remembered for
    /// the process, so that later connections go straight to HTTP/1.1. The SSE client's default.
    case automatic
}
