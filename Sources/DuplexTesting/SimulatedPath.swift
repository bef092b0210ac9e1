import NIOConcurrencyHelpers

/// The two directions of one simulated connection, a WebSocket's or an event stream's: the server
/// it reached, which end has closed, whether its path is gone, and when the bytes sent each way
/// arrive (each way in order, after the link's delay, jitter, bandwidth and loss).
final class SimulatedPath: Sendable {
    private let network: SimulatedNetwork

    private struct State {
        var server: SimulatedServer?
        /// The client learnt it ended: nothing more reaches it.
        var closedForClient = false
        /// The server's end is gone: nothing more reaches it.
        var closedForServer = false
        /// Its path is gone (``SimulatedNetwork/switchPath()``): nothing sent over it arrives.
        var blackholed = false
        var upstream = TestClock.Instant()
        var downstream = TestClock.Instant()
    }

    private let state = NIOLockedValueBox(State())

    init(network: SimulatedNetwork) {
        self.network = network
    }

    /// The server accepted it.
    func opened(server: SimulatedServer?) {
        state.withLockedValue { $0.server = server }
    }

    /// Sends `bytes` one way; `delivery` runs when they arrive, unless the path is gone by then.
    func send(upstream: Bool, bytes: Int, _ delivery: @escaping @Sendable () -> Void) {
        let at = state.withLockedValue { state -> TestClock.Instant in
            upstream
                ? network.arrival(bytes: bytes, upstream: true, after: &state.upstream)
                : network.arrival(bytes: bytes, upstream: false, after: &state.downstream)
        }
        network.deliver(at: at) { [self] in
            guard !state.withLockedValue({ $0.blackholed }) else { return }
            delivery()
        }
    }

    /// Its path is gone: from now on nothing sent either way arrives, and neither end is told,
    /// as when a phone moves from Wi-Fi to cellular with its connections open.
    func blackhole() {
        state.withLockedValue { $0.blackholed = true }
    }

    /// The server, while its end is open.
    var liveServer: SimulatedServer? {
        state.withLockedValue { $0.closedForServer ? nil : $0.server }
    }

    /// Whether the client's end is open.
    var reachesClient: Bool {
        state.withLockedValue { !$0.closedForClient }
    }

    /// The server's end is gone.
    func closeForServer() {
        state.withLockedValue { $0.closedForServer = true }
    }

    /// The client's end is gone; true the first time.
    func closeForClient() -> Bool {
        state.withLockedValue { state in
            defer { state.closedForClient = true }
            return !state.closedForClient
        }
    }
}
