import NIOCore
package import DuplexSchema
import DuplexWire
package import Logging
import NIOConcurrencyHelpers

/// An instruction to one live connection.
package enum ConnectionCommand: Sendable, Equatable {
    /// WebSocket: send a close frame with this code and reason. SSE: end the stream.
    case close(WebSocketCloseCode, String)
    /// Close the TCP connection at once, with no close frame and no end of stream.
    case drop
    /// Stop reading and writing for this long: pings go unanswered.
    case stall(Duration)
}

/// What kind of connection, and where.
package struct ConnectionInfo: Sendable, Equatable {
    package enum Kind: Sendable, Equatable {
        case webSocket
        case eventStream
    }

    package var kind: Kind
    /// The route's name in the route table (``RouteTable/Route/name``), such as "echo".
    package var route: String
    /// The chat room, for chat connections.
    package var room: String?
    /// Whether it is a stream of an HTTP/2 connection (its metrics' transport is `h2`).
    var overHTTP2 = false

    /// A connection of `kind` on `route` (in `room`, for a room stream), over HTTP/2 or not.
    package init(kind: Kind, route: String, room: String? = nil, overHTTP2: Bool = false) {
        self.kind = kind
        self.route = route
        self.room = room
        self.overHTTP2 = overHTTP2
    }

    /// Whether `channel` is a stream of an HTTP/2 connection: its parent is the connection, whose
    /// parent is the listening socket (an HTTP/1.1 connection's parent is the listener itself).
    static func isHTTP2Stream(_ channel: any Channel) -> Bool {
        channel.parent?.parent != nil
    }
}

/// The live WebSocket connections and SSE streams, so that the server can tell all of them to
/// close, and wait for them, when it shuts down.
package final class ConnectionRegistry: Sendable {
    private struct Entry {
        var info: ConnectionInfo
        /// Carries a command to the connection, onto its event loop.
        var deliver: @Sendable (ConnectionCommand) -> Void
    }

    private struct State: DeferringWork {
        var nextID: UInt64 = 0
        var entries: [UInt64: Entry] = [:]
        var shutdownReason: (WebSocketCloseCode, String)?
        /// Who waits for the last connection to end (``waitUntilEmpty()``).
        var drainWaiters = Waiters<Void>()
        var afterUnlock: [@Sendable () -> Void] = []
    }

    private let state = NIOLockedValueBox(State())
    /// Where connections are counted, by route.
    private let metrics: ServerMetrics
    /// Where connections log: the server's logger.
    package let logger: Logger

    /// A registry that counts its connections in `metrics` and whose connections log to `logger`.
    package init(metrics: ServerMetrics, logger: Logger = Logger(label: "duplex-server")) {
        self.metrics = metrics
        self.logger = logger
    }

    /// The number of live connections.
    package var count: Int { state.withLockedValue { $0.entries.count } }

    /// Registers a connection served on its event loop, with no task: `deliver` receives its
    /// commands (on any thread). Call ``remove(_:)`` with the returned id once it has closed.
    func register(_ info: ConnectionInfo, deliver: @escaping @Sendable (ConnectionCommand) -> Void) -> UInt64 {
        let (id, shutdown) = state.withLockedValue { state in
            state.nextID += 1
            state.entries[state.nextID] = Entry(info: info, deliver: deliver)
            return (state.nextID, state.shutdownReason)
        }
        metrics.opened(info)
        if let (code, reason) = shutdown { deliver(.close(code, reason)) }
        return id
    }

    /// Sends `command` to every connection `matching` selects; returns how many it reached.
    @discardableResult
    package func send(_ command: ConnectionCommand, matching: (ConnectionInfo) -> Bool) -> Int {
        let targets = state.withLockedValue { state in
            state.entries.values.filter { matching($0.info) }.map(\.deliver)
        }
        for deliver in targets { deliver(command) }
        return targets.count
    }

    /// Tells every connection, present and future, to close, then waits until none is left or
    /// `timeout` has passed.
    package func shutdown(code: WebSocketCloseCode, reason: String, timeout: Duration) async {
        let targets = state.withLockedValue { state in
            state.shutdownReason = (code, reason)
            return state.entries.values.map(\.deliver)
        }
        for deliver in targets { deliver(.close(code, reason)) }
        try? await withDeadline(timeout, orThrow: { CancellationError() }) { await self.waitUntilEmpty() }
    }

    /// Accepts connections again after a shutdown: used when the server restarts.
    package func reopen() {
        state.withLockedValue { $0.shutdownReason = nil }
    }

    /// Returns once no connection is left, or when the task is cancelled.
    package func waitUntilEmpty() async {
        try? await state.wait(in: \.drainWaiters) { state in state.entries.isEmpty ? .success(()) : nil }
    }

    /// Forgets a connection once it has closed.
    package func remove(_ id: UInt64) {
        let (entry, drained) = state.withLockedValue { state in
            let entry = state.entries.removeValue(forKey: id)
            return (entry, state.entries.isEmpty ? state.drainWaiters.takeAll() : .none)
        }
        if let entry { metrics.closed(entry.info) }
        // Once the connection is counted closed: who waited for the last one sees it counted.
        drained.resume()
    }
}
