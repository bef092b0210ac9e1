import DuplexHost
import NIOCore
public import DuplexSchema
public import Tracing

/// Everything a ``DuplexServer`` can be told. Every field has a default suited to local testing.
///
/// ```swift
/// var configuration = DuplexServerConfiguration(port: 0)   // any free port
/// configuration.tickInterval = .milliseconds(50)
/// let server = DuplexServer(configuration: configuration)
/// ```
public struct DuplexServerConfiguration: Sendable {
    /// The address to listen on. Default `127.0.0.1`.
    public var host: String
    /// The port to listen on; 0 picks a free port (read it with ``DuplexServer/port()``). Default 8080.
    public var port: Int
    /// How many room events each chat room keeps for `since` resumes. Default 1000.
    public var historyLimit: Int
    /// How many bytes of events each chat room keeps for resumes; the oldest go first. Default 1 MiB.
    public var historyBytesLimit: Int
    /// How many bytes of history all rooms together keep; a room that passes it drops its own
    /// oldest events. Default 64 MiB.
    public var totalHistoryBytesLimit: Int
    /// The largest WebSocket message accepted, in bytes; a larger one gets close 1009. Default 16 MiB.
    public var maxMessageBytes: Int
    /// Limits on chat rooms, names, message ids and texts.
    public var chatLimits: ChatLimits
    /// The most chat rooms the server holds. A new room beyond it evicts the empty room unused for
    /// longest (its history and epoch are gone); only when no room is empty is a new room refused
    /// (HTTP 503, or `room_limit` and 1013 over WebSocket). Default 256.
    public var maxRooms: Int
    /// How many frames may wait for one slow client before it is disconnected (WebSocket close 1013,
    /// or the end of its SSE stream) so that it can resume from its last seq or event id. Default 4096.
    public var outboundQueueLimit: Int
    /// How many bytes may wait for one slow client before it is disconnected, as for
    /// ``outboundQueueLimit``. Default 1 MiB.
    public var outboundQueueBytes: Int
    /// The interval of `GET /events` ticks when the request gives no `interval`. Default 1 s.
    public var tickInterval: Duration
    /// The shortest `interval` a request may ask of `GET /events`. Default 10 ms.
    public var minimumTickInterval: Duration
    /// The reconnection time, in milliseconds, sent as `retry:` when an SSE stream opens. Default 2000.
    public var sseRetryMilliseconds: Int
    /// How long an SSE stream may stay silent before the server sends a comment heartbeat. Default 15 s.
    public var heartbeatInterval: Duration
    /// How long the server waits for a peer's answering close frame before it closes the TCP
    /// connection. Default 5 s.
    public var closeTimeout: Duration
    /// How long a graceful shutdown waits for connections to close after telling them to; then
    /// every connection still open (a peer that never reads, say) is closed hard, the number is
    /// logged, and the server stops. Default 10 s.
    public var shutdownTimeout: Duration
    /// Whether ``DuplexServer/restart(downFor:amnesia:)`` holds the port while down (bound, not
    /// listening: connections are refused), so that no outgoing connection can take it as its
    /// local port meanwhile. Default true; when the port is taken anyway, the restart tries to
    /// listen again every 100 ms for up to 30 s.
    public var holdsPortWhileRestarting = true
    /// How long a connection may take to send a complete request head: from when it opens, and
    /// from the first byte of each later request on a keep-alive connection. A connection that
    /// sends nothing, or headers at a trickle, is closed then (with 408 if it sent anything).
    /// Default 10 s.
    public var requestHeadTimeout: Duration
    /// How long a keep-alive HTTP connection may stay idle between requests. Default 60 s.
    public var idleTimeout: Duration
    /// The most TCP connections served at once; one more gets 503 and is closed. Default 10,000.
    public var maxConnections: Int
    /// The longest request line, in bytes; a longer one gets 414. Default 8 KiB.
    public var maxRequestLineBytes: Int
    /// The largest request head (request line and header fields), in bytes; a larger one gets
    /// 431. Default 32 KiB.
    public var maxRequestHeadBytes: Int
    /// The most header fields in a request; more get 431. Default 100.
    public var maxHeaderFields: Int
    /// Where chat rooms live: in this process's memory (the default: nothing else is needed, and
    /// a restart loses the rooms), or in PostgreSQL, shared by every server that names the same
    /// database (the article "Running several nodes" in this module's documentation).
    public var store: ChatStoreConfiguration = .memory
    /// Whether the `/_chaos/` HTTP endpoints exist (for loopback peers only). Default false.
    public var chaos: Bool
    /// Which subprotocol `/echo` selects among those a client offers: nil (the default) takes
    /// the client's first; a list takes the first of the list that the client offered, and
    /// none when it offered none of them. A client that offers none gets none.
    public var echoSubprotocols: [String]?
    /// Faults on every message `/echo` sends back (a delay, swapped pairs, duplicates,
    /// fragments, a drop after the Nth), as on a scripted route; echo connections are then
    /// journaled in ``DuplexServer/journal`` too. Default: none.
    public var echoFaults = WebSocketFaults()
    /// permessage-deflate (RFC 7692), negotiated with clients that offer it (browsers always
    /// do); nil turns it off. Default: on, messages of 256 bytes or more, 12-bit windows. A
    /// connection's zlib streams (about 35 KiB, measured) are made when its first compressed
    /// message arrives or its first message above the threshold leaves: an idle connection
    /// pays nothing for them.
    public var compression: PerMessageDeflate?
    /// TLS: nil (the default) serves plain HTTP and `ws://`; set, every route is served over
    /// TLS only (`https://`, `wss://`), with client certificates and the TLS fault listeners
    /// if it asks for them. ``DuplexServerTLS/selfSigned(hosts:)`` makes a CA and a certificate.
    public var tls: DuplexServerTLS?
    /// HTTP/2 on the TLS listener (``DuplexServerHTTP2``): offered by ALPN next to HTTP/1.1,
    /// with its own limits. Default: enabled. Without ``tls`` the server speaks HTTP/1.1 only.
    public var http2 = DuplexServerHTTP2()
    /// Where each WebSocket connection and SSE stream reports a span, from its upgrade or request
    /// to its end (with its route and close code), and each other HTTP request one (with its
    /// route and status), a child of the trace context the request carried as the tracer reads
    /// it (swift-otel's propagator reads W3C `traceparent`). Default nil:
    /// `InstrumentationSystem.tracer`, none until the application bootstraps one.
    public var tracer: (any Tracer)? = nil
    /// A cassette to replay (`ReplayConfiguration`, from `DuplexRecordReplay`): the server then serves its recorded
    /// sessions, at their paths, instead of echo, chat and the tick stream. Default nil.
    public var replay: ReplayConfiguration? = nil
    /// Routes of your own protocol, served beside the built-in ones (`ScriptedRoute`, from `DuplexScripted`); what
    /// they serve and receive goes to ``DuplexServer/journal``. A route that clashes with a
    /// built-in one stops the server from starting (``DuplexServerError/invalidRoutes(_:)``).
    /// Default none.
    public var routes: [ScriptedRoute] = []
    /// An upstream to record (`RecordConfiguration`, from `DuplexRecordReplay`): the server then forwards every WebSocket
    /// connection and SSE stream to it and records them, instead of serving echo, chat and the
    /// tick stream. Default nil.
    public var record: RecordConfiguration? = nil

    /// Creates a configuration; every argument has a default.
    public init(
        host: String = "127.0.0.1",
        port: Int = 8080,
        historyLimit: Int = 1000,
        maxMessageBytes: Int = 16 * 1024 * 1024,
        chatLimits: ChatLimits = ChatLimits(),
        maxRooms: Int = 256,
        outboundQueueLimit: Int = 4096,
        tickInterval: Duration = .seconds(1),
        minimumTickInterval: Duration = .milliseconds(10),
        sseRetryMilliseconds: Int = 2000,
        heartbeatInterval: Duration = .seconds(15),
        closeTimeout: Duration = .seconds(5),
        shutdownTimeout: Duration = .seconds(10),
        chaos: Bool = false,
        requestHeadTimeout: Duration = .seconds(10),
        idleTimeout: Duration = .seconds(60),
        maxConnections: Int = 10_000,
        maxRequestLineBytes: Int = 8 * 1024,
        maxRequestHeadBytes: Int = 32 * 1024,
        maxHeaderFields: Int = 100,
        historyBytesLimit: Int = 1024 * 1024,
        totalHistoryBytesLimit: Int = 64 * 1024 * 1024,
        outboundQueueBytes: Int = 1024 * 1024,
        echoSubprotocols: [String]? = nil,
        compression: PerMessageDeflate? = PerMessageDeflate(maxWindowBits: 12, peerMaxWindowBits: 12)
    ) {
        self.echoSubprotocols = echoSubprotocols
        self.compression = compression
        self.host = host
        self.port = port
        self.historyLimit = historyLimit
        self.maxMessageBytes = maxMessageBytes
        self.chatLimits = chatLimits
        self.maxRooms = maxRooms
        self.outboundQueueLimit = outboundQueueLimit
        self.tickInterval = tickInterval
        self.minimumTickInterval = minimumTickInterval
        self.sseRetryMilliseconds = sseRetryMilliseconds
        self.heartbeatInterval = heartbeatInterval
        self.closeTimeout = closeTimeout
        self.shutdownTimeout = shutdownTimeout
        self.chaos = chaos
        self.requestHeadTimeout = requestHeadTimeout
        self.idleTimeout = idleTimeout
        self.maxConnections = maxConnections
        self.maxRequestLineBytes = maxRequestLineBytes
        self.maxRequestHeadBytes = maxRequestHeadBytes
        self.maxHeaderFields = maxHeaderFields
        self.historyBytesLimit = historyBytesLimit
        self.totalHistoryBytesLimit = totalHistoryBytesLimit
        self.outboundQueueBytes = outboundQueueBytes
    }
}

extension DuplexServerConfiguration {
    /// What the host keeps to, from this configuration.
    var hostConfiguration: HostServer.Configuration {
        var host = HostServer.Configuration()
        host.host = self.host
        host.port = port
        host.scheme = tls == nil ? "http" : "https"
        host.idleTimeout = idleTimeout
        host.maxMessageBytes = maxMessageBytes
        host.closeTimeout = closeTimeout
        host.limits = ConnectionGuard.Limits(
            requestHeadTimeout: TimeAmount(requestHeadTimeout),
            maxRequestLineBytes: maxRequestLineBytes,
            maxRequestHeadBytes: maxRequestHeadBytes,
            maxHeaderFields: maxHeaderFields
        )
        host.maxConnections = maxConnections
        host.compression = compression
        host.http2 = http2.enabled ? http2.limits : nil
        host.outboundQueue = (outboundQueueLimit, outboundQueueBytes)
        host.heartbeatInterval = heartbeatInterval
        host.sseRetryMilliseconds = sseRetryMilliseconds
        host.shutdownTimeout = shutdownTimeout
        host.holdsPortWhileRestarting = holdsPortWhileRestarting
        host.writersRoute = "chat"
        host.tracer = tracer
        return host
    }
}
