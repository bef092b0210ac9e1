/// Which HTTP a ``WebSocket`` opens its connection over (``WebSocketConfiguration/httpVersion``).
///
/// Over HTTP/2 (RFC 8441, extended CONNECT) the WebSockets of a process to one origin (host,
/// port, TLS trust and identity, and proxy alike) share one TCP and TLS connection, each on a
/// stream of its own. Ping, reconnection, backpressure and every stream guarantee are the same
/// as over HTTP/1.1. When the server sends GOAWAY, the sockets on that connection run on until
/// they end; new ones, and reconnections, open a new connection. The connection closes when its
/// last socket does.
///
/// HTTP/2 needs `wss://`: a `ws://` URL always uses HTTP/1.1 with ``automatic``, and fails with
/// ``WebSocketError/Code/handshakeFailed`` with ``http2``.
public enum WebSocketHTTPVersion: Sendable, Hashable {
    /// HTTP/1.1 and the `Upgrade` handshake: one TCP connection per socket. The default.
    case http1
    /// HTTP/2 only: the connection must negotiate `h2` by ALPN and the server must announce
    /// `SETTINGS_ENABLE_CONNECT_PROTOCOL`; otherwise the attempt fails with
    /// ``WebSocketError/Code/handshakeFailed``, saying which.
    case http2
    /// HTTP/2 when ALPN chooses `h2` and the server announces extended CONNECT, otherwise
    /// HTTP/1.1, as browsers do. An origin found without either is remembered for the process, so
    /// that later connections go straight to HTTP/1.1.
    case automatic
}
