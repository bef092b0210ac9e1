public import Duplex
public import DuplexFaultProxy
import DuplexSchema
import DuplexWire
import Foundation
import NIOConcurrencyHelpers

/// Clients and servers joined in memory, on one ``TestClock``: no sockets, no real
/// time. Every delivery, connection attempt and timer is an event on the clock's timeline, and
/// every random choice (the link's jitter and loss, the clients' reconnection jitter) comes from
/// the network's ``seed``: the same seed gives the same ``eventLog``.
///
/// Made by ``withSimulatedNetwork(seed:link:stallTimeout:_:)``, which drives the clock. A server is a
/// ``SimulatedServer`` (``server(host:port:)``): it echoes by default, answers pings, and can
/// stop, start, restart after a while, close its connections or stop answering pings. A client is
/// a `WebSocket` made by ``webSocket(url:protocols:configuration:)`` (or any `WebSocket` given
/// ``configure(_:)-(WebSocketConfiguration)``'s configuration and ``clock``). The link between them takes a
/// `FaultProxy.LinkProfile` (``link``): delay and jitter each way, bandwidth, and loss as TCP sees
/// it (a lost 1,460-byte segment stalls the stream for a retransmission timeout); ``partition()``
/// holds every delivery until ``heal()``, and ``switchPath()`` silently kills every open
/// connection, as a phone changing networks does.
///
/// What it simulates is the WebSocket between the client's lifecycle and a server: connecting,
/// messages, pings, close handshakes, drops, and every timer of the client (reconnection backoff,
/// ping interval and pong timeout, connect and close timeouts, the preamble's); and event streams
/// (``eventSource(url:retryPolicy:configuration:lastEventID:)``): `retry:`, `Last-Event-ID`,
/// `Retry-After`, read timeouts. TLS, HTTP/2, the kernel's TCP and the Duplex server's own
/// handlers need real sockets: test those with `withDuplexServer`.
public final class SimulatedNetwork: Sendable {
    /// The seed every random choice of this network comes from.
    public let seed: UInt64
    /// The clock of every timer and delivery.
    public let clock: TestClock

    struct State {
        var servers: [String: SimulatedServer] = [:]
        var link: FaultProxy.LinkProfile
        var random: SeededGenerator
        var log: [String] = []
        var clients = 0
        var connections = 0
        var partitioned = false
        /// Deliveries held by a partition, in order.
        var held: [@Sendable () -> Void] = []
        var sockets: [WebSocket] = []
        var eventSources: [ServerSentEventManager] = []
        /// How to end each connection a scripted route served, at the simulation's end.
        var routeEndings: [@Sendable () -> Void] = []
    }

    let state: NIOLockedValueBox<State>
    /// The event loop its servers' scripted routes run on: the clock's.
    let eventLoop: ClockEventLoop

    /// A network with no servers, whose random choices come from `seed`.
    init(seed: UInt64, link: FaultProxy.LinkProfile) {
        self.seed = seed
        self.clock = TestClock()
        self.eventLoop = ClockEventLoop(clock: clock)
        self.state = NIOLockedValueBox(State(link: link, random: SeededGenerator(seed: seed)))
        clock.observeSleeps { [weak self] setAt, _ in
            self?.record("timer set at \(setAt) fires")
        }
    }

    /// The link between every client and server; change it at any time (what is already on its
    /// way keeps the time it was given).
    public var link: FaultProxy.LinkProfile {
        get { state.withLockedValue { $0.link } }
        set { state.withLockedValue { $0.link = newValue } }
    }

    /// A server that listens at `host` and `port` (a client's URL names them), up from now. The
    /// same one when asked twice.
    public func server(host: String, port: Int = 80) -> SimulatedServer {
        state.withLockedValue { state in
            if let server = state.servers["\(host):\(port)"] { return server }
            let server = SimulatedServer(network: self, name: "\(host):\(port)")
            state.servers["\(host):\(port)"] = server
            return server
        }
    }

    /// `configuration` with this network as its transport and its reconnection jitter drawn from
    /// the seed: for a `WebSocket` made with ``clock``.
    public func configure(_ configuration: WebSocketConfiguration) -> WebSocketConfiguration {
        configured(configuration).configuration
    }

    /// `strategy` with its jitter drawn from the seed: for a `ReconnectingWebSocket` made with
    /// ``clock``, whose delays are its strategy's.
    public func configure(_ strategy: ReconnectionStrategy) -> ReconnectionStrategy {
        seeded(strategy, client: nextClient())
    }

    private func configured(_ configuration: WebSocketConfiguration) -> (configuration: WebSocketConfiguration, client: Int) {
        var configured = configuration
        let number = nextClient()
        configured.transport = .custom { SimulatedTransport(network: self, client: number) }
        configured.reconnection = seeded(configured.reconnection, client: number)
        return (configured, number)
    }

    private func nextClient() -> Int {
        state.withLockedValue { state -> Int in
            state.clients += 1
            return state.clients
        }
    }

    /// `strategy` with its jitter drawn from the seed, a stream of its own for each client.
    private func seeded(_ strategy: ReconnectionStrategy, client: Int) -> ReconnectionStrategy {
        var strategy = strategy
        let jitter = NIOLockedValueBox(SeededGenerator(seed: seed, stream: UInt64(client)))
        strategy.jitterSource = { range in
            jitter.withLockedValue { generator in Double.random(in: range, using: &generator) }
        }
        return strategy
    }

    /// A client of this network: `configuration` as ``configure(_:)-(WebSocketConfiguration)`` makes it, on ``clock``. Its
    /// state changes are in the ``eventLog`` (`c1 state connected`); it is terminated when the
    /// simulation ends. It offers `protocols` as its subprotocols (a preset route's, such as
    /// `graphql-transport-ws`).
    public func webSocket(url: String, protocols: [String] = [], configuration: WebSocketConfiguration = .init()) -> WebSocket {
        guard let parsed = URL(string: url) else { preconditionFailure("not a URL: \(url)") }
        let (configuration, number) = configured(configuration)
        let socket = WebSocket(request: WebSocketRequest(url: parsed, protocols: protocols), configuration: configuration, clock: clock)
        state.withLockedValue { $0.sockets.append(socket) }
        let states = socket.stateEvents
        Task(on: clock) { [weak self] in
            for await state in states { self?.record("c\(number) state \(state)") }
        }
        return socket
    }

    /// An event-stream client of this network, on ``clock``: its requests go to the
    /// ``SimulatedServer`` its URL names, its reconnection jitter is drawn from the seed, its
    /// connect and read timeouts and the server's `retry:` and `Retry-After` are waited out on the
    /// clock. Its state changes are in the ``eventLog`` (`c2 state connected`); it is terminated
    /// when the simulation ends.
    public func eventSource(
        url: String,
        retryPolicy: RetryPolicy = .init(),
        configuration: SSEConfiguration = .init(),
        lastEventID: String? = nil
    ) -> ServerSentEventManager {
        guard let parsed = URL(string: url) else { preconditionFailure("not a URL: \(url)") }
        let number = nextClient()
        var configuration = configuration
        configuration.transport = SimulatedEventStreamTransport(network: self, client: number)
        let manager = ServerSentEventManager(
            request: SSERequest(url: parsed), retryPolicy: seeded(retryPolicy, client: number), configuration: configuration,
            lastEventID: lastEventID, clock: clock)
        state.withLockedValue { $0.eventSources.append(manager) }
        let states = manager.stateEvents
        Task(on: clock) { [weak self] in
            for await state in states { self?.record("c\(number) state \(state)") }
        }
        return manager
    }

    /// Holds every delivery each way (connection attempts too) until ``heal()``, as a cable pulled
    /// out would: nothing is lost, nothing arrives.
    public func partition() {
        state.withLockedValue { $0.partitioned = true }
        record("network partitioned")
    }

    /// Ends a ``partition()``: what it held arrives, in order, from now on.
    public func heal() {
        let held = state.withLockedValue { state -> [@Sendable () -> Void] in
            state.partitioned = false
            defer { state.held = [] }
            return state.held
        }
        record("network healed")
        for delivery in held { clock.schedule(at: clock.now, delivery) }
    }

    /// Moves every client to a new path, as a phone that goes from Wi-Fi to cellular: the
    /// connections open now are silently gone (nothing sent over them arrives either way, and
    /// neither end is told, so a client learns it from its pings or a timeout), and new
    /// connections work.
    public func switchPath() {
        let servers = state.withLockedValue { state in state.servers.keys.sorted().compactMap { state.servers[$0] } }
        let dropped = servers.flatMap(\.openConnections)
        let streams = servers.flatMap(\.openStreams)
        let gone = dropped.count + streams.count
        record("network path switched (\(gone) connection\(gone == 1 ? "" : "s") gone)")
        for connection in dropped { connection.blackhole() }
        for stream in streams { stream.blackhole() }
    }

    /// Adds a line of the test's own to the event log, at the current virtual time.
    public func record(_ line: String) {
        let stamped = "\(clock.now) \(line)"
        state.withLockedValue { $0.log.append(stamped) }
    }

    /// Every event so far, one per line, each with its virtual time: connection attempts and
    /// their outcome, the clients' state changes, messages (kind and size), pings and pongs, closes
    /// and drops, servers going down and up, timers firing (with the time each was set), and the
    /// test's own lines.
    public var eventLog: String {
        state.withLockedValue { $0.log.joined(separator: "\n") }
    }

    /// The log's lines.
    public var eventLines: [String] {
        state.withLockedValue { $0.log }
    }

    /// When bytes sent now over `direction`'s link arrive, after its delay, jitter, bandwidth and
    /// loss; never before what was sent over it earlier (`after`). Draws from the seed.
    func arrival(bytes: Int, upstream: Bool, after earlier: inout TestClock.Instant) -> TestClock.Instant {
        let now = clock.now
        let at = state.withLockedValue { state -> TestClock.Instant in
            let link = upstream ? state.link.uplink : state.link.downlink
            var delay = link.delay
            if link.jitter > .zero {
                delay += link.jitter * Double.random(in: 0...1, using: &state.random)
            }
            if let rate = link.bytesPerSecond, rate > 0 {
                delay += .seconds(Double(bytes) / Double(rate))
            }
            if link.loss > 0 {
                var timeout = max(.milliseconds(200), link.delay * 2)
                for _ in 0..<max(1, (bytes + 1_459) / 1_460) where Double.random(in: 0..<1, using: &state.random) < link.loss {
                    delay += timeout
                    timeout = min(timeout * 2, .seconds(120))
                }
            }
            return now.advanced(by: delay)
        }
        earlier = max(earlier, at)
        return earlier
    }

    /// Runs `delivery` at `instant`, or once the network heals when it is partitioned then.
    func deliver(at instant: TestClock.Instant, _ delivery: @escaping @Sendable () -> Void) {
        clock.schedule(at: instant) { [weak self] in
            guard let self else { return }
            let held = self.state.withLockedValue { state -> Bool in
                guard state.partitioned else { return false }
                state.held.append(delivery)
                return true
            }
            if !held { delivery() }
        }
    }

    func nextConnection() -> Int {
        state.withLockedValue { state in
            state.connections += 1
            return state.connections
        }
    }

    func server(for url: URL) -> SimulatedServer? {
        server(atHost: url.host ?? "", port: url.port ?? (url.scheme == "wss" || url.scheme == "https" ? 443 : 80))
    }

    /// The server at `host` and `port`, if one was made.
    func server(atHost host: String, port: Int) -> SimulatedServer? {
        state.withLockedValue { $0.servers["\(host):\(port)"] }
    }

    /// Remembers how to end a connection a scripted route serves: when the simulation ends, the
    /// route sees it end, as at a server's shutdown.
    func track(routeEnding: @escaping @Sendable () -> Void) {
        state.withLockedValue { $0.routeEndings.append(routeEnding) }
    }

    /// Terminates the clients it made and ends every sleep left, so that no task waits forever.
    func shutDown() async {
        let (sockets, eventSources) = state.withLockedValue { ($0.sockets, $0.eventSources) }
        for socket in sockets { await socket.terminate() }
        for eventSource in eventSources { await eventSource.terminate() }
        endRoutes()
        clock.cancelAll()
    }

    /// Ends what scripted routes still serve and fails their timers left, on the network's loop:
    /// their connections end for them (a route's `onEnd` runs, its journal says the client went),
    /// and no timer's promise is let go of unfulfilled.
    private func endRoutes() {
        let endings = state.withLockedValue { state in
            defer { state.routeEndings = [] }
            return state.routeEndings
        }
        let loop = eventLoop
        let end: @Sendable () -> Void = {
            for ending in endings { ending() }
            loop.failScheduled()
        }
        if loop.inEventLoop { end() } else { loop.execute(end) }
    }

    /// Lets go of its servers (and their connections), its clients and held deliveries, which
    /// hold the network: once the simulation is over, the network, its clock and the clock's
    /// thread go away.
    func release() {
        clock.cancelAll()
        endRoutes()
        // Taken out under the lock and let go after it: the last reference to a client ends it,
        // which closes its connection and logs here.
        let (servers, sockets, eventSources, held) = state.withLockedValue { state in
            defer {
                state.servers = [:]
                state.sockets = []
                state.eventSources = []
                state.held = []
            }
            return (Array(state.servers.values), state.sockets, state.eventSources, state.held)
        }
        for server in servers { server.forgetAll() }
        withExtendedLifetime((sockets, eventSources, held)) {}
    }
}
