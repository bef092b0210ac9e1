@testable import Duplex
import Foundation
import Testing

/// When `NetworkPathWatcher` checks connections: the decision is a pure struct, tested here on
/// every platform (the watcher around it runs `NWPathMonitor`, on Apple platforms only).
@Suite("NetworkPathTracker")
struct NetworkPathTrackerTests {
    typealias Snapshot = NetworkPathTracker.Snapshot

    /// Feeds the snapshots to a new tracker; what it decided for each.
    func decisions(_ snapshots: [Snapshot]) -> [Bool] {
        var tracker = NetworkPathTracker()
        return snapshots.map { tracker.update($0) }
    }

    @Test("the path at start is not a change; another interface is; the same path again is not")
    func interfaceChanges() {
        let paths = [
            Snapshot(usable: true, interfaces: ["en0"]),  // the path at start
            Snapshot(usable: true, interfaces: ["en0"]),  // no change
            Snapshot(usable: true, interfaces: ["pdp_ip0"]),  // Wi-Fi to cellular
            Snapshot(usable: true, interfaces: ["en0", "pdp_ip0"]),  // Wi-Fi joined
        ]
        #expect(decisions(paths) == [false, false, true, true])
    }

    @Test("losing the network calls for nothing; the network back, even on the same interface, calls for a check")
    func lossAndReturn() {
        let paths = [
            Snapshot(usable: true, interfaces: ["en0"]),
            Snapshot(usable: false, interfaces: []),  // no check can succeed now
            Snapshot(usable: true, interfaces: ["en0"]),  // back: the old connections may be dead
        ]
        #expect(decisions(paths) == [false, false, true])
    }

    @Test("every client type takes the hint through one protocol; one with no connection has nothing to check")
    func oneProtocol() async {
        let url = URL(string: "ws://127.0.0.1:9/echo")!
        let connections: [any ConnectionCheck] = [
            WebSocket(url: url), ReconnectingWebSocket { WebSocket(url: url) }, ChatClient(url: url, name: "ana"),
            ServerSentEventManager(request: SSERequest(url: URL(string: "http://127.0.0.1:9/events")!)),
        ]
        for connection in connections {
            #expect(await connection.checkConnection(within: .milliseconds(100)), "\(type(of: connection))")
        }
    }
}
