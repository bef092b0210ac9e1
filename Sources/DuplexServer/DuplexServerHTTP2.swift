import DuplexHost

/// HTTP/2 on the server's TLS listener, and the limits each HTTP/2 connection keeps.
///
/// With TLS (``DuplexServerConfiguration/tls``) and this enabled (the default), ALPN offers
/// `h2` before `http/1.1`. Over HTTP/2, every HTTP route (the SSE streams with their resume
/// rules, `/health`, `/metrics`, the demo page, the chaos routes) is served on streams of one
/// connection, and the WebSocket routes through extended CONNECT (RFC 8441, `:protocol =
/// websocket`), announced with `SETTINGS_ENABLE_CONNECT_PROTOCOL`, with the same limits,
/// compression, close codes and faults as over HTTP/1.1. Plain TCP listeners speak HTTP/1.1
/// only; the TLS fault listeners offer `http/1.1` only.
///
/// Besides the settings here, swift-nio-http2's defaults guard each connection: a client that
/// resets more than 200 streams in 30 s (the 2023 "rapid reset" attack), floods PING,
/// SETTINGS or other control frames, or sends more CONTINUATION or empty DATA frames in a row
/// than a request needs is sent GOAWAY and cut off.
///
/// A server whose limits HTTP/2 cannot announce (no stream, a window past 2^31 - 1) does not
/// start: ``DuplexServerError/invalidTLSConfiguration(_:)`` names the setting.
public struct DuplexServerHTTP2: Sendable, Hashable {
    /// Whether ALPN offers `h2` on the TLS listener. Default true.
    public var enabled: Bool
    /// The limits each connection announces and keeps, as the host takes them.
    var limits = HTTP2Limits()

    /// How many streams (requests, SSE streams and WebSockets) one connection may have open at
    /// once (`SETTINGS_MAX_CONCURRENT_STREAMS`). A client that opens more breaks the protocol
    /// and gets GOAWAY with `PROTOCOL_ERROR` (checked with Python's `h2`). Default 100.
    public var maxConcurrentStreams: Int {
        get { limits.maxConcurrentStreams }
        set { limits.maxConcurrentStreams = newValue }
    }
    /// The largest request header list a client may send, in bytes as RFC 9113 counts them
    /// (`SETTINGS_MAX_HEADER_LIST_SIZE`). Default 32 KiB, as
    /// ``DuplexServerConfiguration/maxRequestHeadBytes`` is for HTTP/1.1.
    public var maxHeaderListBytes: Int {
        get { limits.maxHeaderListBytes }
        set { limits.maxHeaderListBytes = newValue }
    }
    /// Each stream's receive window, the bytes a client may send on one stream before the
    /// server reads them (`SETTINGS_INITIAL_WINDOW_SIZE`); the connection's window is this times
    /// 4. Default 65,535, HTTP/2's own.
    public var streamWindowBytes: Int {
        get { limits.streamWindowBytes }
        set { limits.streamWindowBytes = newValue }
    }
    /// How long a connection with no open stream is kept before the server sends GOAWAY and
    /// closes it. Default 60 s. A new connection must open its first stream within
    /// ``DuplexServerConfiguration/requestHeadTimeout`` (10 s), as an HTTP/1.1 connection must
    /// send its first request head.
    public var idleTimeout: Duration {
        get { limits.idleTimeout }
        set { limits.idleTimeout = newValue }
    }

    /// HTTP/2 with these limits; every argument has a default.
    public init(
        enabled: Bool = true,
        maxConcurrentStreams: Int = 100,
        maxHeaderListBytes: Int = 32 * 1024,
        streamWindowBytes: Int = 65_535,
        idleTimeout: Duration = .seconds(60)
    ) {
        self.enabled = enabled
        self.maxConcurrentStreams = maxConcurrentStreams
        self.maxHeaderListBytes = maxHeaderListBytes
        self.streamWindowBytes = streamWindowBytes
        self.idleTimeout = idleTimeout
    }

    /// Checks the limits are ones HTTP/2 can announce.
    /// - Throws: ``DuplexServerError/invalidTLSConfiguration(_:)`` naming the setting.
    func validate() throws {
        if let reason = limits.invalidity { throw DuplexServerError.invalidTLSConfiguration("http2.\(reason)") }
    }
}
