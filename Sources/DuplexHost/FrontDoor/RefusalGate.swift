import NIOConcurrencyHelpers

/// Whether the server refuses new requests: for a while (a chaos fault), or while it stops.
package final class RefusalGate: Sendable {
    private let until = NIOLockedValueBox<ContinuousClock.Instant?>(nil)
    private let stopping = NIOLockedValueBox(false)
    /// The paths still served while refusing: the route table's say (the chaos routes).
    private let exempt = NIOLockedValueBox<@Sendable (String) -> Bool>({ _ in false })

    /// A gate that refuses nothing yet.
    package init() {}

    package func refuse(for duration: Duration) {
        until.withLockedValue { $0 = .now + duration }
    }

    var isRefusing: Bool {
        until.withLockedValue { $0.map { $0 > .now } ?? false }
    }

    /// Serves the paths `predicate` names (a request's target, query included) while refusing.
    package func exempting(_ predicate: @escaping @Sendable (String) -> Bool) {
        exempt.withLockedValue { $0 = predicate }
    }

    /// Whether a request for `target` (a path and query) is refused now.
    package func refuses(_ target: String) -> Bool {
        guard isRefusing else { return false }
        return !exempt.withLockedValue { $0 }(target)
    }

    /// Marks the server as stopping (or, with false, serving again after a restart): new requests
    /// are then closed unanswered. A WebSocket that upgraded while the HTTP server shuts down
    /// would be closed by swift-websocket with 1000, which tells a client not to come back, and
    /// an SSE client gives up on a 503; a closed connection makes both retry.
    package func setStopping(_ value: Bool) {
        stopping.withLockedValue { $0 = value }
    }

    var isStopping: Bool {
        stopping.withLockedValue { $0 }
    }
}
