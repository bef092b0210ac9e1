/// Messages and payload bytes counted on a hot path between two additions to the metrics
/// (``ServerMetrics/Route/add(_:)``): one read batch, one drain, one turn of the loop.
///
/// 32-bit fields, 32 bytes in every connection: what one batch counts is far below 4 GiB (its
/// messages are bounded by what one read brings and by the message limit), and additions wrap
/// rather than trap.
package struct MessageTally: Sendable {
    package var messagesIn: UInt32 = 0
    package var bytesIn: UInt32 = 0
    package var messagesOut: UInt32 = 0
    package var bytesOut: UInt32 = 0
    /// permessage-deflate: the compressed bytes of the messages that came or went compressed,
    /// and the same messages' bytes uncompressed.
    var compressedIn: UInt32 = 0
    var inflatedIn: UInt32 = 0
    var compressedOut: UInt32 = 0
    var deflatedOut: UInt32 = 0

    /// Adds one message of `bytes` bytes read.
    package mutating func read(bytes: Int) {
        messagesIn &+= 1
        bytesIn &+= UInt32(truncatingIfNeeded: bytes)
    }

    /// Adds one message of `bytes` bytes sent.
    package mutating func sent(bytes: Int) {
        messagesOut &+= 1
        bytesOut &+= UInt32(truncatingIfNeeded: bytes)
    }

    /// Adds a message that came compressed in `compressed` bytes and inflated to `inflated`.
    package mutating func inflated(_ compressed: Int, to inflated: Int) {
        compressedIn &+= UInt32(truncatingIfNeeded: compressed)
        inflatedIn &+= UInt32(truncatingIfNeeded: inflated)
    }

    /// Adds a message of `size` bytes that went compressed in `compressed` bytes.
    package mutating func deflated(_ size: Int, to compressed: Int) {
        deflatedOut &+= UInt32(truncatingIfNeeded: size)
        compressedOut &+= UInt32(truncatingIfNeeded: compressed)
    }

    /// Adds what `other` counted.
    package mutating func add(_ other: MessageTally) {
        messagesIn &+= other.messagesIn
        bytesIn &+= other.bytesIn
        messagesOut &+= other.messagesOut
        bytesOut &+= other.bytesOut
        compressedIn &+= other.compressedIn
        inflatedIn &+= other.inflatedIn
        compressedOut &+= other.compressedOut
        deflatedOut &+= other.deflatedOut
    }
}
