public import Duplex
import DuplexHost
public import DuplexSchema
public import DuplexScripted
import Foundation
import NIOConcurrencyHelpers

/// A server on a ``SimulatedNetwork``: while up, it accepts WebSocket connections, echoes each
/// message (or answers with ``respond(_:)``) and answers pings, and it answers every
/// event-stream request (a `ServerSentEventManager`'s) with its stream of ``publish(_:)``ed
/// events. What it does is logged in the network's event log, at virtual times.
///
/// A connection to a path one of its ``serve(_:)``d scripted routes matches is served by that
/// route instead: a WebSocket in the Duplex server's own WebSocket handler (the route's
/// handlers, script, refusals, faults and protocol presets as on a real server), an event stream
/// by the route's script through the server's own stream writer; their timers on the network's
/// clock, and what they do in ``journal`` at virtual times.
public final class SimulatedServer: Sendable {
    /// `host:port`.
    public let name: String
    /// Weak: the network holds its servers; a server kept after its simulation logs nothing.
    weak let network: SimulatedNetwork?

    struct State {
        var isUp = true
        var answersPings = true
        var connections: [Int: SimulatedConnection] = [:]
        var accepted = 0
        var respond: @Sendable (WebSocketMessage) -> [WebSocketMessage] = { [$0] }
        var streams: [Int: SimulatedEventStream] = [:]
        /// Every event published, encoded, with its id.
        var published: [(id: String?, text: String)] = []
        var eventStreamRetry: Duration?
        var eventStreamAnswer: HTTPAnswer?
        var lastEventIDs: [String?] = []
        /// Scripted WebSocket routes, the most specific first.
        var routes: [(pattern: RoutePattern, route: ScriptedRoute)] = []
    }

    let state = NIOLockedValueBox(State())

    /// What its scripted routes received and sent, each entry stamped with the network's virtual
    /// time: the clock's start is the epoch (1970-01-01T00:00:00Z), so an entry 90 seconds into
    /// the simulation is at `1970-01-01T00:01:30Z`.
    public let journal: ScriptJournal

    init(network: SimulatedNetwork, name: String) {
        self.network = network
        self.name = name
        let clock = network.clock
        self.journal = ScriptJournal(now: { Date(timeIntervalSince1970: clock.now.offset.seconds) })
    }

    /// Serves `routes` from now on (scripted WebSocket routes, by script or by handlers, the
    /// protocol presets, scripted SSE routes): a WebSocket connection, or an event stream's
    /// request with the route's method, whose path one matches is served by it (the most specific
    /// when several do); any other is echoed, or gets the server's own stream. Routes added
    /// before stay.
    /// - Throws: ``SimulatedRouteError`` for a proxy route, which needs the real server
    ///   (`withDuplexServer`) and a real backend; nothing is added then.
    public func serve(_ routes: [ScriptedRoute]) throws(SimulatedRouteError) {
        if let unsupported = routes.first(where: { !$0.isScriptedWebSocket && !$0.isScriptedStream }) {
            throw SimulatedRouteError(route: unsupported.description)
        }
        state.withLockedValue { state in
            state.routes += routes.map { (RoutePattern($0.path), $0) }
            state.routes.sort { $0.pattern.isMoreSpecific(than: $1.pattern) }
        }
        network?.record("server \(name) serves \(routes.map(\.description).joined(separator: ", "))")
    }

    /// Whether it accepts connections; when down, an attempt is refused after a round trip.
    public var isUp: Bool { state.withLockedValue { $0.isUp } }

    /// Whether it answers pings with pongs (true by default): false, as a server whose process
    /// hangs, and a client's pings go unanswered.
    public var answersPings: Bool {
        get { state.withLockedValue { $0.answersPings } }
        set {
            state.withLockedValue { $0.answersPings = newValue }
            network?.record("server \(name) \(newValue ? "answers" : "ignores") pings")
        }
    }

    /// What it sends back for each message it receives, in order: the message itself by default.
    public func respond(_ answer: @escaping @Sendable (WebSocketMessage) -> [WebSocketMessage]) {
        state.withLockedValue { $0.respond = answer }
    }

    /// How many connections are open: WebSockets and event streams.
    public var connectionCount: Int { state.withLockedValue { $0.connections.count + $0.streams.count } }

    /// How many connections (WebSockets and event streams) it has accepted since it was made.
    public var acceptedCount: Int { state.withLockedValue { $0.accepted } }

    /// Goes down: every connection drops with no close frame and every event stream before its
    /// end (their clients learn it a link's delay later), and attempts are refused until
    /// ``start()``.
    public func stop() {
        let (dropped, streams) = state.withLockedValue { state in
            state.isUp = false
            defer {
                state.connections = [:]
                state.streams = [:]
            }
            return (Self.inOrder(state.connections), Self.inOrder(state.streams))
        }
        network?.record("server \(name) down")
        for connection in dropped { connection.serverDropped() }
        for stream in streams { stream.serverDropped() }
    }

    /// Comes up: attempts are accepted again.
    public func start() {
        state.withLockedValue { $0.isUp = true }
        network?.record("server \(name) up")
    }

    /// Goes down now and comes up `downtime` later, on the network's clock.
    public func restart(downFor downtime: Duration) {
        stop()
        guard let clock = network?.clock else { return }
        clock.schedule(at: clock.now.advanced(by: downtime)) { [weak self] in self?.start() }
    }

    /// Closes every connection with a close frame, and ends every event stream's response.
    public func close(code: WebSocketCloseCode = .goingAway, reason: String = "") {
        let (open, streams) = state.withLockedValue { state in
            defer {
                state.connections = [:]
                state.streams = [:]
            }
            return (Self.inOrder(state.connections), Self.inOrder(state.streams))
        }
        for connection in open { connection.serverClosed(code: code, reason: reason) }
        for stream in streams { stream.serverEnded() }
    }

    /// Sends `message` to every open connection.
    public func send(_ message: WebSocketMessage) {
        let open = state.withLockedValue { Self.inOrder($0.connections) }
        for connection in open { connection.serverSends(message) }
    }

    /// Every open connection, in the order they were made.
    var openConnections: [SimulatedConnection] {
        state.withLockedValue { Self.inOrder($0.connections) }
    }

    /// Every open event stream, in the order they were made.
    var openStreams: [SimulatedEventStream] {
        state.withLockedValue { Self.inOrder($0.streams) }
    }

    static func inOrder<Value>(_ byNumber: [Int: Value]) -> [Value] {
        byNumber.keys.sorted().compactMap { byNumber[$0] }
    }

    /// How the server answers a connection's handshake. Unchecked: a route's service is made,
    /// carried and run on the network's loop's thread only.
    enum Acceptance: @unchecked Sendable {
        /// Down: refused.
        case down
        /// Accepted, echoed.
        case echo
        /// Accepted by a scripted route: the subprotocol it chose, and the connection's service.
        case route(subprotocol: String?, service: any EventLoopWebSocketService)
        /// A scripted route refused it with this HTTP status.
        case refused(status: Int)
    }

    /// Answers `connection`'s handshake, `request`: down, echoed, or as the route its path
    /// matches decides (the route's `accept` runs now, on the network's event loop).
    func accept(_ connection: SimulatedConnection, request: WebSocketRequest) -> Acceptance {
        let (isUp, routes) = state.withLockedValue { ($0.isUp, $0.routes) }
        guard isUp, let network else { return .down }
        var acceptance = Acceptance.echo
        let path = request.url.path.isEmpty ? "/" : request.url.path
        if let route = routes.first(where: { $0.route.isScriptedWebSocket && $0.pattern.match(path) != nil })?.route {
            let scripted = ScriptedRequest(
                method: "GET",
                path: path,
                query: request.url.query,
                headers: request.additionalHeaders.sorted { $0.key < $1.key }.map { ($0.key, $0.value) },
                subprotocols: request.protocols
            )
            switch route.open(scripted, journal: journal, eventLoop: network.eventLoop) {
            case .refused(let status, _, _): return .refused(status: status)
            case .accepted(let subprotocol, let service): acceptance = .route(subprotocol: subprotocol, service: service)
            case nil: break
            }
        }
        state.withLockedValue { state in
            state.accepted += 1
            state.connections[connection.number] = connection
        }
        return acceptance
    }

    func answers(to message: WebSocketMessage) -> [WebSocketMessage] {
        state.withLockedValue { $0.respond }(message)
    }

    var ping: Bool { state.withLockedValue { $0.isUp && $0.answersPings } }

    /// Lets go of every connection, with no word to anyone: the simulation is over.
    func forgetAll() {
        // Let go of after the lock: what a connection holds may log, or reach this server.
        let (connections, streams) = state.withLockedValue { state in
            defer {
                state.connections = [:]
                state.streams = [:]
            }
            return (state.connections, state.streams)
        }
        withExtendedLifetime((connections, streams)) {}
    }

    func forget(_ connection: SimulatedConnection) {
        _ = state.withLockedValue { $0.connections.removeValue(forKey: connection.number) }
    }
}

/// A route a ``SimulatedServer`` cannot serve: a proxy route.
public struct SimulatedRouteError: Error, CustomStringConvertible {
    /// The route, described.
    public var route: String

    public var description: String {
        "a simulated server serves scripted WebSocket and SSE routes and presets; \(route) needs the real server (withDuplexServer)"
    }
}

extension Duration {
    /// In seconds, with the fraction.
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
