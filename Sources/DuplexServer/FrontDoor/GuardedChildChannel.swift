import HummingbirdCore
import Logging
import NIOCore

/// A server child channel that puts a ``ConnectionGuard`` in front of another one, and counts
/// the connection in a ``ChannelTracker``: past its limit, the guard answers 503 and closes it.
struct GuardedChildChannel<Base: ServerChildChannel>: ServerChildChannel {
    let base: Base
    let limits: ConnectionGuard.Limits
    let refusal: RefusalGate
    let tracker: ChannelTracker

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Base.Value> {
        let admitted = tracker.admit(channel)
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(ConnectionGuard(limits: limits, refusal: refusal, admitted: admitted), position: .first)
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Base.Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
