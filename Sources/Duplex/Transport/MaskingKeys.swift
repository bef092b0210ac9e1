#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif
import NIOPosix
import NIOWebSocket

/// Masking keys for client frames (RFC 6455 §5.3: unpredictable, from a strong source of
/// entropy), drawn from the system's random source 4 KiB at a time instead of one system call
/// per frame. The 4 KiB are the thread's (an event loop's), shared by its connections: a
/// connection holds none, which matters to a server that holds thousands of client connections
/// (a proxy route's upstream legs).
struct MaskingKeys {
    /// The random bytes of one thread, and how far they were used.
    private final class Pool: @unchecked Sendable {
        var bytes: [UInt8] = []
        var index = 0
    }

    /// Each thread's pool, made on its first frame.
    private static let pools = ThreadSpecificVariable<Pool>()

    mutating func next() -> WebSocketMaskingKey {
        let pool: Pool
        if let current = Self.pools.currentValue {
            pool = current
        } else {
            pool = Pool()
            Self.pools.currentValue = pool
        }
        if pool.index + 4 > pool.bytes.count { Self.refill(pool) }
        let start = pool.index
        pool.index += 4
        var word = Word(value: pool.bytes.withUnsafeBytes { UInt64($0.loadUnaligned(fromByteOffset: start, as: UInt32.self)) })
        // swift-nio's `random(using:)` is inlined here; its initializer from bytes is not, and
        // costs a generic call for every frame.
        return WebSocketMaskingKey.random(using: &word)
    }

    /// Hands `random(using:)` the 32 random bits already drawn.
    private struct Word: RandomNumberGenerator {
        let value: UInt64
        mutating func next() -> UInt64 { value }
    }

    private static func refill(_ pool: Pool) {
        let size = 4096
        pool.bytes = [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            fill(buffer)
            count = size
        }
        pool.index = 0
    }

    private static func fill(_ buffer: UnsafeMutableBufferPointer<UInt8>) {
        #if canImport(Darwin)
        arc4random_buf(buffer.baseAddress, buffer.count)
        #elseif canImport(Glibc)
        var filled = 0
        let descriptor = open("/dev/urandom", O_RDONLY | O_CLOEXEC)
        if descriptor >= 0 {
            while filled < buffer.count {
                let got = read(descriptor, buffer.baseAddress! + filled, buffer.count - filled)
                if got > 0 {
                    filled += got
                } else if got == 0 || errno != EINTR {
                    break
                }
            }
            close(descriptor)
        }
        if filled < buffer.count { fallback(UnsafeMutableBufferPointer(rebasing: buffer[filled...])) }
        #else
        fallback(buffer)
        #endif
    }

    private static func fallback(_ buffer: UnsafeMutableBufferPointer<UInt8>) {
        var generator = SystemRandomNumberGenerator()
        for index in buffer.indices { buffer[index] = generator.next() }
    }
}
