/// A connection that can be told the network path changed or the app resumed, to check itself
/// at once rather than after its next keep-alive: ``WebSocket``, ``ReconnectingWebSocket``,
/// ``ChatClient`` and ``ServerSentEventManager``. Hand several to one `NetworkPathWatcher`
/// (Apple platforms), or call ``checkConnection(within:)`` yourself when `scenePhase` becomes
/// `.active`.
public protocol ConnectionCheck: AnyObject, Sendable {
    /// Checks the connection at once, and reconnects now, the backoff reset, when it does not
    /// answer within `deadline`. Returns true when it answered (or there was none to check).
    @discardableResult
    func checkConnection(within deadline: Duration) async -> Bool
}

extension WebSocket: ConnectionCheck {}
extension ReconnectingWebSocket: ConnectionCheck {}
extension ChatClient: ConnectionCheck {}
extension ServerSentEventManager: ConnectionCheck {}

/// Decides, from successive snapshots of the device's network path, when connections should be
/// checked: when the path is usable and differs from the one before (another set of interfaces,
/// as Wi-Fi to cellular, or usable again after it was not). The first snapshot is the path at
/// start, not a change; a path that became unusable calls for nothing, since no check could
/// succeed: the one that follows it does. `NetworkPathWatcher` feeds it from `NWPathMonitor`.
struct NetworkPathTracker: Sendable {
    /// What matters of a path.
    struct Snapshot: Sendable, Equatable {
        /// Whether the path can be used (`NWPath.Status.satisfied`).
        var usable: Bool
        /// The names of its interfaces, in preference order (`en0`, `pdp_ip0`).
        var interfaces: [String]
    }

    private var last: Snapshot?

    /// Records `snapshot`; true when the connections should be checked now.
    mutating func update(_ snapshot: Snapshot) -> Bool {
        defer { last = snapshot }
        guard let last else { return false }
        return snapshot.usable && snapshot != last
    }
}
