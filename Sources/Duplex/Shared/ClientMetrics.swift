import CoreMetrics
import DuplexSchema

/// What a client counts, through swift-metrics: into the factory its configuration names, or
/// `MetricsSystem.factory` (a no-op until the application bootstraps a backend).
///
/// Every label comes from a fixed set: the client's kind (`websocket`, `sse`) and, for failures
/// and losses, the error's code. The names are listed in docs/libraries.md ("Client metrics").
struct ClientMetrics: Sendable {
    /// `websocket` or `sse`.
    let kind: String
    /// Whether anything is counted: false with swift-metrics' no-op factory (no backend
    /// bootstrapped), so that each message costs nothing then.
    private let counting: Bool
    private let factory: any MetricsFactory
    private let attempts: Counter
    private let reconnects: Counter
    private let messagesIn: Counter
    private let messagesOut: Counter
    private let bytesIn: Counter
    private let bytesOut: Counter
    private let sendsQueued: Counter
    private let sendsDropped: Counter
    private let pingRoundTrip: Timer
    private let pingsMissed: Counter
    private let retryApplied: Recorder

    init(kind: String, factory: (any MetricsFactory)?) {
        self.kind = kind
        let factory = factory ?? MetricsSystem.factory
        self.factory = factory
        self.counting = !(factory is NOOPMetricsHandler)
        let byKind = [("kind", kind)]
        func counter(_ label: String, _ dimensions: [(String, String)] = []) -> Counter {
            Counter(label: label, dimensions: byKind + dimensions, factory: factory)
        }
        attempts = counter("duplex_client_connection_attempts_total")
        reconnects = counter("duplex_client_reconnects_total")
        messagesIn = counter("duplex_client_messages_total", [("direction", "in")])
        messagesOut = counter("duplex_client_messages_total", [("direction", "out")])
        bytesIn = counter("duplex_client_message_bytes_total", [("direction", "in")])
        bytesOut = counter("duplex_client_message_bytes_total", [("direction", "out")])
        sendsQueued = counter("duplex_client_sends_queued_total")
        sendsDropped = counter("duplex_client_sends_dropped_total")
        pingRoundTrip = Timer(label: "duplex_client_ping_round_trip_seconds", dimensions: byKind, preferredDisplayUnit: .seconds, factory: factory)
        pingsMissed = counter("duplex_client_pings_missed_total")
        retryApplied = Recorder(label: "duplex_client_sse_retry_seconds", dimensions: byKind, aggregate: true, factory: factory)
    }

    /// Counts what a lifecycle action says happened: an attempt, a failure or a loss (by
    /// `cause`), a scheduled reconnection, queued sends given up.
    func observe<Policy: LifecyclePolicy>(_ action: ConnectionLifecycle<Policy>.Action, cause: (Policy.Loss) -> String) {
        switch action {
        case .startConnecting:
            attempts.increment()
        case .scheduleRetry:
            reconnects.increment()
        case .attemptFailed(let loss, _):
            Counter(label: "duplex_client_connection_failures_total", dimensions: [("kind", kind), ("cause", cause(loss))], factory: factory)
                .increment()
        case .lost(let loss, _):
            Counter(label: "duplex_client_connections_lost_total", dimensions: [("kind", kind), ("cause", cause(loss))], factory: factory).increment()
        case .dropQueued(let count, _):
            sendsDropped.increment(by: count)
        default:
            break
        }
    }

    /// A message (an SSE event) of `bytes` bytes arrived.
    func received(bytes: Int) {
        guard counting else { return }
        messagesIn.increment()
        bytesIn.increment(by: bytes)
    }

    /// A message of `bytes` bytes was handed to the connection.
    func sent(bytes: Int) {
        guard counting else { return }
        messagesOut.increment()
        bytesOut.increment(by: bytes)
    }

    /// A send was queued for the reconnection.
    func queued() {
        sendsQueued.increment()
    }

    /// A keep-alive ping was answered after `roundTrip`.
    func pong(after roundTrip: Duration) {
        let (seconds, attoseconds) = roundTrip.components
        pingRoundTrip.recordNanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    /// A keep-alive ping went unanswered within the pong timeout.
    func missedPing() {
        pingsMissed.increment()
    }

    /// The server's `retry:` set the delay of a reconnection.
    func appliedRetry(milliseconds: Int) {
        retryApplied.record(Double(milliseconds) / 1000)
    }
}
