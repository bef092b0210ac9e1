import NIOConcurrencyHelpers
import NIOCore

/// Every open TCP connection of the server, so that it can cap how many there are and, when a
/// graceful shutdown runs past its deadline, close the ones still open.
package final class ChannelTracker: Sendable {
    private struct State {
        var channels: [ObjectIdentifier: any Channel] = [:]
    }

    /// The most connections served at once; one more is answered 503 and closed.
    package let limit: Int
    private let state = NIOLockedValueBox(State())

    package init(limit: Int) {
        self.limit = limit
    }

    /// The number of open connections.
    package var count: Int { state.withLockedValue { $0.channels.count } }

    /// Tracks `channel` until it closes; returns whether it is within the limit.
    func admit(_ channel: any Channel) -> Bool {
        let id = ObjectIdentifier(channel)
        let admitted = state.withLockedValue { state in
            state.channels[id] = channel
            return state.channels.count <= limit
        }
        channel.closeFuture.whenComplete { [self] _ in
            state.withLockedValue { _ = $0.channels.removeValue(forKey: id) }
        }
        return admitted
    }

    /// Closes every open connection at once; returns how many there were.
    @discardableResult
    package func closeAll() -> Int {
        let channels = state.withLockedValue { Array($0.channels.values) }
        for channel in channels { channel.close(promise: nil) }
        return channels.count
    }
}
