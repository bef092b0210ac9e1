import NIOConcurrencyHelpers

/// One connection's text waiting to be written (chat frames, SSE events), bounded both in count
/// and in bytes, so a peer that never reads costs at most `maxBytes` however large its events.
final class OutboundQueue: Sendable {
    /// What to write, in order; it ends when the queue is finished.
    let items: AsyncStream<String>
    private let continuation: AsyncStream<String>.Continuation
    private let queued = NIOLockedValueBox((count: 0, bytes: 0, overflowed: false))
    let maxCount: Int
    let maxBytes: Int

    init(maxCount: Int, maxBytes: Int) {
        (items, continuation) = AsyncStream<String>.makeStream()
        self.maxCount = max(maxCount, 1)
        self.maxBytes = max(maxBytes, 1)
    }

    /// Queues `text`; false, queuing nothing, when that would pass either bound or the queue
    /// was finished.
    func offer(_ text: String) -> Bool {
        let size = text.utf8.count
        let accepted = queued.withLockedValue { queued in
            // One item larger than the whole bound still goes through on an empty queue.
            guard queued.count < maxCount, queued.count == 0 || queued.bytes + size <= maxBytes else {
                queued.overflowed = true
                return false
            }
            queued.count += 1
            queued.bytes += size
            return true
        }
        guard accepted else { return false }
        if case .enqueued = continuation.yield(text) { return true }
        return false
    }

    /// Marks `text`, taken from ``items``, as written.
    func written(_ text: String) {
        let size = text.utf8.count
        queued.withLockedValue { queued in
            queued.count -= 1
            queued.bytes -= size
        }
    }

    /// Whether an offer was refused for passing a bound: the reader fell behind.
    var overflowed: Bool { queued.withLockedValue { $0.overflowed } }

    /// Ends ``items`` after what is queued.
    func finish() {
        continuation.finish()
    }
}
