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
    let metrics: ServerMetrics
    let tracker: ChannelTracker
    /// The listener's TLS context; nil for plain TCP.
    let tls: NIOSSLContext?

    /// The sizes of the buffer a connection reads into. NIO keeps that buffer between reads, so
    /// its first size is what every idle connection holds: 512 bytes (a request head, a small
    /// message) instead of NIO's 2,048, which keeps 1.5 KiB less per idle WebSocket
    /// (docs/benchmarks.md). It grows as reads fill it, up to 64 KiB, as NIO's default does.
    static var receiveSizes: AdaptiveRecvByteBufferAllocator {
        AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65_536)
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Base.Value> {
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

    func handle(value: Base.Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
