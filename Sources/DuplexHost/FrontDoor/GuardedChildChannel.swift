package import HummingbirdCore
package import Logging
package import NIOCore
package import NIOSSL

/// A server child channel that puts a ``ConnectionGuard`` in front of another one, and counts
/// the connection in a ``ChannelTracker``: past its limit, the guard answers 503 and closes it.
/// On a TLS listener, NIOSSL's server handler comes first, so that the guard and everything
/// after it see the decrypted bytes.
package struct GuardedChildChannel<Base: ServerChildChannel>: ServerChildChannel {
    package let base: Base
    package let limits: ConnectionGuard.Limits
    package let refusal: RefusalGate
    package let metrics: ServerMetrics
    package let tracker: ChannelTracker
    /// The listener's TLS context; nil for plain TCP.
    package let tls: NIOSSLContext?

    /// `base`, behind a ``ConnectionGuard`` with `limits`, admitted by `tracker`, over `tls`.
    package init(
        base: Base, limits: ConnectionGuard.Limits, refusal: RefusalGate, metrics: ServerMetrics, tracker: ChannelTracker, tls: NIOSSLContext?
    ) {
        self.base = base
        self.limits = limits
        self.refusal = refusal
        self.metrics = metrics
        self.tracker = tracker
        self.tls = tls
    }

    /// The sizes of the buffer a connection reads into. NIO keeps that buffer between reads, so
    /// its first size is what every idle connection holds: 512 bytes (a request head, a small
    /// message) instead of NIO's 2,048, which keeps 1.5 KiB less per idle WebSocket
    /// (docs/benchmarks.md). It grows as reads fill it, up to 64 KiB, as NIO's default does.
    static var receiveSizes: AdaptiveRecvByteBufferAllocator {
        AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65_536)
    }

    package func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Base.Value> {
        let admitted = tracker.admit(channel)
        return channel.eventLoop.makeCompletedFuture {
            let operations = channel.pipeline.syncOperations
            try channel.syncOptions?.setOption(ChannelOptions.recvAllocator, value: Self.receiveSizes)
            try operations.addHandler(ConnectionGuard(limits: limits, refusal: refusal, metrics: metrics, admitted: admitted), position: .first)
            if let tls {
                try operations.addHandler(TLSWriteCoalescer(), position: .first)
                try operations.addHandler(NIOSSLServerHandler(context: tls), position: .first)
            }
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }
    }

    package func handle(value: Base.Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
