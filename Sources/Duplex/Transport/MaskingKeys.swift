#if canImport(Darwin)
import Darwin
#elseif canImport(Glibc)
import Glibc
#endif
import NIOWebSocket

/// Masking keys for client frames (RFC 6455 §5.3: unpredictable, from a strong source of
/// entropy), drawn from the system's random source 4 KiB at a time instead of one system call
/// per frame.
struct MaskingKeys {
    private var bytes: [UInt8] = []
    private var index = 0

    mutating func next() -> WebSocketMaskingKey {
        if index + 4 > bytes.count { refill() }
        let start = index
        index += 4
        var word = Word(value: bytes.withUnsafeBytes { UInt64($0.loadUnaligned(fromByteOffset: start, as: UInt32.self)) })
        // swift-nio's `random(using:)` is inlined here; its initializer from bytes is not, and
        // costs a generic call for every frame.
        return WebSocketMaskingKey.random(using: &word)
    }

    /// Hands `random(using:)` the 32 random bits already drawn.
    private struct Word: RandomNumberGenerator {
        let value: UInt64
        mutating func next() -> UInt64 { value }
    }

    private mutating func refill() {
        let size = 4096
        bytes = [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            Self.fill(buffer)
            count = size
        }
        index = 0
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
