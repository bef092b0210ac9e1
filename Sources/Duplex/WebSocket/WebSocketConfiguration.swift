public import CoreMetrics
public import DuplexSchema
public import Logging

/// How a ``WebSocket`` behaves. Every field has a default.
///
/// ```swift
/// var configuration = WebSocketConfiguration()
/// configuration.ping = PingConfig(pingInterval: .seconds(15), maxPingFailures: 2)
/// configuration.reconnection = .exponentialBackoff(maxAttempts: 10)
/// configuration.tlsTrust = .certificateAuthority(pem: localCA)
/// let socket = WebSocket(url: url, configuration: configuration)
/// ```
public struct WebSocketConfiguration: Sendable {
    /// Keep-alive pings; nil sends none. Default: none.
    public var ping: PingConfig?
    /// Automatic reconnection after a lost connection. Default: ``ReconnectionStrategy/none``.
    public var reconnection: ReconnectionStrategy
    /// How many sends may wait while reconnecting; one more throws
    /// ``WebSocketError/Code/sendQueueFull``. Default 1000.
    public var maxQueuedSends: Int
    /// The largest message accepted, in bytes; a larger one closes the connection with 1009.
    /// Default 16 MiB.
    public var maxMessageBytes: Int
    /// How long a connection attempt (TCP, TLS and handshake) may take. Default 10 s.
    public var connectTimeout: Duration
    /// How long to wait for the peer's close frame after sending ours. Default 5 s.
    public var closeTimeout: Duration
    /// Which certificates `wss://` trusts. Default: the system's roots.
    public var tlsTrust: TLSTrust
    /// The client certificate `wss://` presents when the server asks for one (mutual TLS).
    /// Default none.
    public var tlsIdentity: TLSIdentity? = nil
    /// The proxy connections go through: an HTTP `CONNECT` proxy, SOCKS5, or
    /// ``Proxy/environment``. Default none (direct).
    public var proxy: Proxy? = nil
    /// How many unread elements a lossless consumer stream may hold before the socket stops
    /// reading from the network (see ``StreamBuffering/lossless``); reading resumes at half.
    /// Default 65,536.
    public var streamBufferLimit: Int
    /// The same limit in bytes of message payload. Default 8 MiB.
    public var streamBufferBytes: Int
    /// How ``WebSocket/messages`` and ``WebSocket/events`` buffer for a reader that falls behind.
    /// Default ``StreamBuffering/lossless``: nothing dropped, the sender held back. The status
    /// streams (``WebSocket/stateEvents``, ``WebSocket/pingRoundTrips``) keep the newest
    /// ``streamBufferLimit`` elements whatever this says: they never hold the connection back.
    public var streamBuffering: StreamBuffering
    /// Above this many bytes accepted by ``WebSocket/send(_:)`` and not yet written, `send`
    /// suspends until the buffer drains below ``sendBufferLowWatermark``. Default 1 MiB.
    public var sendBufferHighWatermark: Int
    /// Where suspended sends go on. Default 256 KiB.
    public var sendBufferLowWatermark: Int
    /// The transport. Default: ``WebSocketTransportKind/nio``.
    public var transport: WebSocketTransportKind
    /// HTTP/1.1, HTTP/2 (RFC 8441: sockets to one origin share a connection), or HTTP/2 when
    /// the server offers it (``HTTPVersionPreference``). Default ``HTTPVersionPreference/http1``.
    /// The NIO transport only.
    public var httpVersion: HTTPVersionPreference = .http1
    /// permessage-deflate (RFC 7692) to offer, or nil (the default) to offer none. When the
    /// server accepts, messages of at least `PerMessageDeflate.minimumBytes` go out compressed,
    /// and compressed messages are inflated within ``maxMessageBytes`` (one that inflates past it
    /// gets close 1009). Off by default: it costs CPU and up to about 300 KiB of zlib state per
    /// connection, and pays off for large, repetitive messages over slow links. The NIO
    /// transport only.
    public var compression: PerMessageDeflate?
    /// Where the socket logs. Default: a logger labelled `duplex.websocket`.
    public var logger: Logger
    /// Where the socket counts its connection attempts, failures, reconnections, messages and
    /// ping round trips (docs/libraries.md lists the metrics). Default nil: swift-metrics'
    /// `MetricsSystem.factory`, a no-op until the application bootstraps a backend.
    public var metrics: (any MetricsFactory)? = nil

    /// Creates a configuration; every argument has a default.
    public init(
        ping: PingConfig? = nil,
        reconnection: ReconnectionStrategy = .none,
        maxQueuedSends: Int = 1000,
        maxMessageBytes: Int = 16 * 1024 * 1024,
        connectTimeout: Duration = .seconds(10),
        closeTimeout: Duration = .seconds(5),
        tlsTrust: TLSTrust = .systemRoots,
        streamBufferLimit: Int = 65_536,
        streamBufferBytes: Int = 8 * 1024 * 1024,
        streamBuffering: StreamBuffering = .lossless,
        sendBufferHighWatermark: Int = 1024 * 1024,
        sendBufferLowWatermark: Int = 256 * 1024,
        transport: WebSocketTransportKind = .nio,
        compression: PerMessageDeflate? = nil,
        logger: Logger = Logger(label: "duplex.websocket")
    ) {
        self.ping = ping
        self.reconnection = reconnection
        self.maxQueuedSends = maxQueuedSends
        self.maxMessageBytes = maxMessageBytes
        self.connectTimeout = connectTimeout
        self.closeTimeout = closeTimeout
        self.tlsTrust = tlsTrust
        self.streamBufferLimit = streamBufferLimit
        self.streamBufferBytes = streamBufferBytes
        self.streamBuffering = streamBuffering
        self.sendBufferHighWatermark = max(sendBufferHighWatermark, 1)
        self.sendBufferLowWatermark = min(max(sendBufferLowWatermark, 0), max(sendBufferHighWatermark, 1))
        self.transport = transport
        self.compression = compression
        self.logger = logger
    }
}

/// Which transport carries a ``WebSocket``'s connections.
public struct WebSocketTransportKind: Sendable {
    let make: @Sendable () -> any WebSocketTransport

    /// SwiftNIO, with NIOSSL for `wss://`: Linux and Apple platforms.
    public static var nio: WebSocketTransportKind { WebSocketTransportKind { NIOWebSocketTransport() } }

    /// A transport of your own, for example a test double.
    public static func custom(_ make: @escaping @Sendable () -> any WebSocketTransport) -> WebSocketTransportKind {
        WebSocketTransportKind(make: make)
    }
}
