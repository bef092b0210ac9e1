import NIOConcurrencyHelpers
import NIOCore

/// What a connection accepted and has not handed to the channel yet: appended by the sending
/// threads, taken by the event loop in batches, so writes are coalesced and flushed once per
/// batch. Bounded by its high watermark: above it, senders wait (see ``WebSocketCore``).
final class Outbox: Sendable {
    enum Entry {
        case message(WebSocketMessage)
        case flush(@Sendable (Result<Void, any Error>) -> Void)
    }

    private struct State {
        var entries = CircularBuffer<Entry>()
        var bytes = 0
        /// A drain is on its way: scheduled on the event loop, or waiting for the channel to
        /// become writable.
        var drainScheduled = false
        var aboveHigh = false
        var closed = false
        /// Messages accepted after the connection closed: never written.
        var refused = 0
    }

    private let state = NIOLockedValueBox(State())
    let highWatermark: Int

    init(highWatermark: Int) {
        self.highWatermark = max(highWatermark, 1)
    }

    /// Appends a message. Returns whether a drain must be scheduled, and whether the buffer is
    /// above its high watermark.
    func append(_ message: WebSocketMessage) -> (scheduleDrain: Bool, aboveHigh: Bool) {
        let size = message.byteCount
        return state.withLockedValue { state in
            guard !state.closed else {
                state.refused += 1
                return (false, false)
            }
            state.entries.append(.message(message))
            state.bytes += size
            if state.bytes > highWatermark { state.aboveHigh = true }
            defer { state.drainScheduled = true }
            return (!state.drainScheduled, state.aboveHigh)
        }
    }

    /// Appends a flush marker; false when the connection is closed (the completion has failed).
    func appendFlush(_ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) -> Bool {
        let outcome: Bool? = state.withLockedValue { state in
            guard !state.closed else { return nil }
            state.entries.append(.flush(completion))
            defer { state.drainScheduled = true }
            return !state.drainScheduled
        }
        guard let outcome else {
            completion(.failure(WebSocketError(.connectionLost, "the connection is closed")))
            return false
        }
        return outcome
    }

    /// Whether the buffer is above its high watermark.
    var isAboveHighWatermark: Bool { state.withLockedValue { $0.aboveHigh } }

    /// Takes up to `limit` entries; whether the buffer had been above its high watermark and is
    /// now at or below its low one (then the senders held back may go on); and whether entries
    /// remain (then the drain stays scheduled and must run again).
    func take(upTo limit: Int, lowWatermark: Int) -> (entries: [Entry], drained: Bool, more: Bool) {
        state.withLockedValue { state in
            var taken: [Entry] = []
            taken.reserveCapacity(min(limit, state.entries.count))
            while taken.count < limit, let entry = state.entries.popFirst() {
                if case .message(let message) = entry { state.bytes -= message.byteCount }
                taken.append(entry)
            }
            var drained = false
            if state.aboveHigh, state.bytes <= lowWatermark {
                state.aboveHigh = false
                drained = true
            }
            let more = !state.entries.isEmpty
            state.drainScheduled = more
            return (taken, drained, more)
        }
    }

    /// Refuses every later message; returns what was never taken, and how many were refused.
    func close() -> (entries: CircularBuffer<Entry>, refused: Int) {
        state.withLockedValue { state in
            state.closed = true
            let left = state.entries
            state.entries = CircularBuffer()
            state.bytes = 0
            state.aboveHigh = false
            return (left, state.refused)
        }
    }
}
