#if canImport(Network)
import Dispatch
import Network
import NIOConcurrencyHelpers

/// Checks connections whenever the device's network path changes: Wi-Fi to cellular, a new
/// access point, the network back after it was gone. It runs an `NWPathMonitor`, so it exists on
/// Apple platforms only; elsewhere, call ``ConnectionCheck/checkConnection(within:)`` from
/// whatever tells your app the network changed.
///
/// ```swift
/// let chat = ChatClient(url: url, name: "ana")
/// let watcher = NetworkPathWatcher(checking: [chat, sse])
/// // … when done:
/// watcher.cancel()
/// ```
///
/// On each change, every connection is checked at
/// once, in parallel, each within `deadline`: a WebSocket by a ping, an SSE stream by whether
/// anything arrives. One that fails its check reconnects at once with its backoff reset. The
/// path at start is not a change, and neither is losing the network: the path that comes back
/// is. Pair it with a check when `scenePhase` becomes `.active`, which no path change reports.
public final class NetworkPathWatcher: @unchecked Sendable {
    // NWPathMonitor is thread-safe; it is only started and cancelled here.
    private let monitor = NWPathMonitor()

    /// Starts watching, checking `connections` within `deadline` (2 s by default) on each change.
    public init(checking connections: [any ConnectionCheck], within deadline: Duration = .seconds(2)) {
        let tracker = NIOLockedValueBox(NetworkPathTracker())
        monitor.pathUpdateHandler = { path in
            let snapshot = NetworkPathTracker.Snapshot(
                usable: path.status == .satisfied,
                interfaces: path.availableInterfaces.map(\.name)
            )
            guard tracker.withLockedValue({ $0.update(snapshot) }) else { return }
            Task {
                await withTaskGroup(of: Void.self) { group in
                    for connection in connections {
                        group.addTask { _ = await connection.checkConnection(within: deadline) }
                    }
                }
            }
        }
        monitor.start(queue: DispatchQueue(label: "duplex.network-path-watcher"))
    }

    /// Stops watching. The connections are left as they are.
    public func cancel() {
        monitor.cancel()
    }

    deinit {
        monitor.cancel()
    }
}
#endif
