package import Duplex
import Foundation
import Testing

/// What the backpressure tests share: a flood larger than the kernel holds, and a reader of its
/// numbered messages.
package enum Backpressure {
    /// More bytes than the kernel can hold between a peer that writes and one that reads nothing:
    /// Linux grows the writer's send buffer up to `tcp_wmem`'s maximum (4 MiB by default; a
    /// machine where it grew that far took a 3 MiB flood whole), and the reader's receive buffer
    /// holds 128 KiB more, more once it has read a little; 2 MiB beyond that leaves no doubt.
    package static let moreThanTheKernelHolds: Int = {
        let sendBufferLimit =
            (try? String(contentsOfFile: "/proc/sys/net/ipv4/tcp_wmem", encoding: .utf8))
            .flatMap { $0.split(whereSeparator: \.isWhitespace).last.flatMap { Int($0) } } ?? 4 * 1024 * 1024
        return sendBufferLimit + 2 * 1024 * 1024
    }()

    /// Reads `"N:…"` messages until `total` or the first out of order (recorded as an issue),
    /// and returns how many came in order.
    package static func countInOrder(_ messages: AsyncStream<WebSocketMessage>, upTo total: Int) async -> Int {
        var expected = 0
        for await message in messages {
            guard message.text?.hasPrefix("\(expected):") == true else {
                Issue.record("message \(expected) is \(message.text?.prefix(12) ?? "binary")")
                break
            }
            expected += 1
            if expected == total { break }
        }
        return expected
    }
}
