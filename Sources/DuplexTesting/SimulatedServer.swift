public import Duplex
public import DuplexSchema
import NIOConcurrencyHelpers

/// A server on a ``SimulatedNetwork``: while up, it accepts WebSocket connections, echoes each
/// message (or answers with ``respond(_:)``) and answers pings, and it answers every
/// event-stream request (a `ServerSentEventManager`'s) with its stream of ``publish(_:)``ed
/// events. What it does is logged in the network's event log, at virtual times.
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
    }

    let state = NIOLockedValueBox(State())

    init(network: SimulatedNetwork, name: String) {
        self.network = network
        self.name = name
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

    /// Accepts `connection` when up.
    func accept(_ connection: SimulatedConnection) -> Bool {
        state.withLockedValue { state in
            guard state.isUp else { return false }
            state.accepted += 1
            state.connections[connection.number] = connection
            return true
        }
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
