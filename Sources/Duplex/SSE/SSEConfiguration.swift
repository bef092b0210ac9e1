public import CoreMetrics
public import Logging

/// How a ``ServerSentEventManager`` behaves, beyond its ``RetryPolicy``. Every field has a default.
public struct SSEConfiguration: Sendable {
    /// How long opening the stream may take, up to the response head. Default 10 s.
    public var connectTimeout: Duration
    /// How long the open stream may stay silent (no bytes at all, not even a heartbeat comment)
    /// before it counts as dead and is reopened. Time while a lossless reader is behind, and the
    /// body is not read, does not count. Default 45 s.
    public var readTimeout: Duration
    /// The largest line or event accepted, in bytes. Default 16 MiB.
    public var maxEventBytes: Int
    /// Which certificates `https://` trusts. Default: the system's roots.
    public var tlsTrust: TLSTrust
    /// The client certificate `https://` presents when the server asks for one (mutual TLS).
    /// Default none.
    public var tlsIdentity: TLSIdentity? = nil
    /// The proxy connections go through: an HTTP proxy (`CONNECT` for `https://`), SOCKS5, or
    /// ``Proxy/environment``. Default none (direct).
    public var proxy: Proxy? = nil
    /// The HTTP version of `https://` streams (``HTTPVersionPreference``). Default
    /// ``HTTPVersionPreference/automatic``: HTTP/2 when the server offers it by ALPN, where the
    /// streams of the process to one origin share a connection (no six-connection limit), and
    /// HTTP/1.1 otherwise. `http://` is always HTTP/1.1.
    public var httpVersion: HTTPVersionPreference = .automatic
    /// How many unread events a lossless consumer stream may hold before the manager stops
    /// reading the response body (see ``StreamBuffering/lossless``); reading resumes at half.
    /// Default 65,536.
    public var streamBufferLimit: Int
    /// The same limit in bytes of event data. Default 8 MiB.
    public var streamBufferBytes: Int
    /// How ``ServerSentEventManager/events`` buffers for a reader that falls behind. Default
    /// ``StreamBuffering/lossless``: nothing dropped, the body read no further until the reader
    /// catches up, so TCP holds the server back. ``ServerSentEventManager/stateEvents`` keeps the
    /// newest states and never holds the stream back.
    public var streamBuffering: StreamBuffering
    /// Whether a 5xx or 429 answer is retried (honouring `Retry-After`, bounded by the
    /// ``RetryPolicy``) instead of failing the stream for good. Default false, as the WHATWG
    /// spec has it.
    public var retryOnServerErrors: Bool
    /// Where the manager logs. Default: a logger labelled `duplex.sse`.
    public var logger: Logger
    /// Where the client counts its connection attempts, failures, reconnections, events and the
    /// server's `retry:` values it applied (docs/libraries.md lists the metrics). Default nil: swift-metrics'
    /// `MetricsSystem.factory`, a no-op until the application bootstraps a backend.
    public var metrics: (any MetricsFactory)? = nil
    /// Where requests go: nil for the network. DuplexTesting's simulated network sets its own.
    package var transport: (any EventStreamTransport)? = nil

    /// Creates a configuration; every argument has a default.
    public init(
        connectTimeout: Duration = .seconds(10),
        readTimeout: Duration = .seconds(45),
        maxEventBytes: Int = 16 * 1024 * 1024,
        tlsTrust: TLSTrust = .systemRoots,
        streamBufferLimit: Int = 65_536,
        streamBufferBytes: Int = 8 * 1024 * 1024,
        streamBuffering: StreamBuffering = .lossless,
        retryOnServerErrors: Bool = false,
        logger: Logger = Logger(label: "duplex.sse")
    ) {
        self.retryOnServerErrors = retryOnServerErrors
        self.connectTimeout = connectTimeout
        self.readTimeout = readTimeout
        self.maxEventBytes = maxEventBytes
        self.tlsTrust = tlsTrust
        self.streamBufferLimit = streamBufferLimit
        self.streamBufferBytes = streamBufferBytes
        self.streamBuffering = streamBuffering
        self.logger = logger
    }
}
