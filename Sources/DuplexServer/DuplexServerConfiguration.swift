public import DuplexSchema

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
    /// The largest WebSocket message accepted, in bytes; a larger one gets close 1009. Default 16 MiB.
    public var maxMessageBytes: Int
    /// Limits on chat rooms, names, message ids and texts.
    public var chatLimits: ChatLimits
    /// The most chat rooms the server holds; joining a new room beyond it gets 503. Default 256.
    public var maxRooms: Int
    /// How many frames may wait for one slow client before it is disconnected (WebSocket close 1013,
    /// or the end of its SSE stream) so that it can resume from its last seq or event id. Default 4096.
    public var outboundQueueLimit: Int
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
    /// How long a graceful shutdown waits for connections to close after telling them to. Default 10 s.
    public var shutdownTimeout: Duration
    /// Whether the `/_chaos/` HTTP endpoints exist (for loopback peers only). Default false.
    public var chaos: Bool

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
        chaos: Bool = false
    ) {
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
    }
}
