import NIOConcurrencyHelpers
package import NIOCore

/// The server's open HTTP/2 connections, so that a fault (`/_chaos/goaway`) or a graceful
/// shutdown can send each one GOAWAY.
package final class HTTP2ConnectionSet: Sendable {
    private let connections = NIOLockedValueBox<[ObjectIdentifier: NIOLoopBound<HTTP2IdleMonitor>]>([:])

    /// No connections yet.
    package init() {}

    /// Adds `monitor`'s connection until `channel` closes.
    package func insert(_ monitor: HTTP2IdleMonitor, of channel: any Channel) {
        let id = ObjectIdentifier(channel)
        connections.withLockedValue { $0[id] = NIOLoopBound(monitor, eventLoop: channel.eventLoop) }
        channel.closeFuture.whenComplete { _ in
            _ = self.connections.withLockedValue { $0.removeValue(forKey: id) }
        }
    }

    /// Sends every connection GOAWAY (no error, the last stream it opened): it takes no new
    /// stream, and closes once the streams it has end.
    /// - Returns: how many connections it was sent to.
    @discardableResult
    package func goAway() -> Int {
        let monitors = connections.withLockedValue { Array($0.values) }
        for monitor in monitors {
            monitor.eventLoop.execute { monitor.value.goAway() }
        }
        return monitors.count
    }
}
