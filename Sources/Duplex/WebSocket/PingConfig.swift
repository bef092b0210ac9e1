/// Keep-alive pings, and how many may go unanswered before the connection counts as dead.
///
/// Every `pingInterval` the socket sends a ping with a unique payload. A pong with that payload
/// within `pongTimeout` resets the failure count and measures the round-trip time; no pong counts
/// one failure, unless messages arrived meanwhile (the peer is alive; its pong is queued behind
/// them) or the socket was holding back its reads for slow readers (see ``StreamBuffering``).
/// After `maxPingFailures` failures in a row the connection is torn down, the state
/// becomes `.disconnected(.pingFailed)`, `onPingFailed` runs, and automatic reconnection (if
/// configured) takes over.
///
/// ```swift
/// let config = PingConfig(pingInterval: .seconds(30), maxPingFailures: 3)
/// let socket = WebSocket(url: url, configuration: .init(ping: config))
/// ```
public struct PingConfig: Sendable, Hashable {
    /// How often to ping.
    public var pingInterval: Duration
    /// How many pings in a row may go unanswered; the next miss tears the connection down.
    /// At least 1.
    public var maxPingFailures: UInt
    /// How long to wait for each pong; at most `pingInterval`. Default: `pingInterval`.
    public var pongTimeout: Duration

    /// Creates a ping configuration.
    public init(pingInterval: Duration, maxPingFailures: UInt, pongTimeout: Duration? = nil) {
        self.pingInterval = pingInterval
        self.maxPingFailures = max(maxPingFailures, 1)
        self.pongTimeout = min(pongTimeout ?? pingInterval, pingInterval)
    }
}

/// The ping bookkeeping of one connection: which ping is outstanding, and how many in a row
/// went unanswered. A pure value, driven by the connection's ping loop and unit-tested alone.
struct PingTracker: Sendable {
    enum Outcome: Equatable, Sendable {
        /// The pong arrived; the round-trip time.
        case answered(Duration)
        /// The pong did not arrive; failures so far in a row.
        case missed(failures: Int)
        /// The pong did not arrive and the limit is reached.
        case failed(failures: Int)
    }

    let maxFailures: Int
    private(set) var consecutiveFailures = 0
    private var sequence: UInt64 = 0
    private var outstanding: (payload: [UInt8], sentAt: Duration)?
    private let salt: UInt32

    init(maxFailures: UInt, salt: UInt32 = .random(in: .min ... .max)) {
        self.maxFailures = Int(max(maxFailures, 1))
        self.salt = salt
    }

    /// Starts a ping at `now` (the time on the socket's clock since a start of its own): returns
    /// its payload, unique within the connection (a counter and a salt).
    mutating func nextPing(at now: Duration) -> [UInt8] {
        sequence += 1
        var payload: [UInt8] = []
        withUnsafeBytes(of: sequence.bigEndian) { payload += $0 }
        withUnsafeBytes(of: salt.bigEndian) { payload += $0 }
        outstanding = (payload, now)
        return payload
    }

    /// A pong arrived. Returns the round-trip time when it answers the outstanding ping; a pong
    /// with any other payload (unsolicited, or late for an earlier ping) changes nothing.
    mutating func pongReceived(_ payload: [UInt8], at now: Duration) -> Duration? {
        guard let ping = outstanding, ping.payload == payload else { return nil }
        outstanding = nil
        consecutiveFailures = 0
        return now - ping.sentAt
    }

    /// The pong timeout of the outstanding ping passed.
    /// The pong timeout passed, but messages arrived meanwhile, or the socket held back its reads
    /// for slow readers: a pong still queued behind data is no sign of a dead peer, so the ping
    /// is forgotten, not counted.
    mutating func pongTimeoutExcused() {
        outstanding = nil
    }

    mutating func pongTimeoutElapsed() -> Outcome? {
        guard outstanding != nil else { return nil }
        outstanding = nil
        consecutiveFailures += 1
        return consecutiveFailures >= maxFailures ? .failed(failures: consecutiveFailures) : .missed(failures: consecutiveFailures)
    }
}
