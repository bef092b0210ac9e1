import HummingbirdCore
import Logging
import NIOCore
import NIOSSL

/// A server child channel that puts a ``ConnectionGuard`` in front of another one, and counts
/// the connection in a ``ChannelTracker``: past its limit, the guard answers 503 and closes it.
/// On a TLS listener, NIOSSL's server handler comes first, so that the guard and everything
/// after it see the decrypted bytes.
struct GuardedChildChannel<Base: ServerChildChannel>: ServerChildChannel {
    let base: Base
    let limits: ConnectionGuard.Limits
    let refusal: RefusalGate
    let tracker: ChannelTracker
    /// The listener's TLS context; nil for plain TCP.
    let tls: NIOSSLContext?

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Base.Value> {
        let admitted = tracker.admit(channel)
        return channel.eventLoop.makeCompletedFuture {
            let operations = channel.pipeline.syncOperations
            try operations.addHandler(ConnectionGuard(limits: limits, refusal: refusal, admitted: admitted), position: .first)
            if let tls {
                try operations.addHandler(TLSWriteCoalescer(), position: .first)
                try operations.addHandler(NIOSSLServerHandler(context: tls), position: .first)
            }
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Base.Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
