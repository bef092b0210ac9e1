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
        defer { index += 4 }
        // Through a raw buffer, whose type the runtime need not look up (an array slice's it
        // would, for every frame).
        let start = index
        return bytes.withUnsafeBytes { WebSocketMaskingKey(UnsafeRawBufferPointer(rebasing: $0[start..<start + 4]))! }
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
