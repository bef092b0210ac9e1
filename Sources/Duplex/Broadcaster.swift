package import Logging
import NIOConcurrencyHelpers

/// Fans elements out to any number of `AsyncStream` consumers: each consumer that asks gets
/// its own stream, and every element reaches every consumer.
///
/// Buffering is bounded: each consumer's stream holds at most `limit` elements it has not read
/// yet. When it is full, new elements are dropped for that consumer only (others are not held
/// back), counted in ``droppedCount``, and logged as a warning: the first drop, then one line per
/// 10,000, so a stalled consumer cannot flood the log.
package final class Broadcaster<Element: Sendable>: Sendable {
    private struct State {
        var nextID: UInt64 = 0
        var continuations: [UInt64: AsyncStream<Element>.Continuation] = [:]
        var finished = false
        var dropped = 0
    }

    private let state = NIOLockedValueBox(State())
    private let limit: Int
    private let label: String
    private let logger: Logger

    package init(limit: Int, label: String, logger: Logger) {
        self.limit = max(limit, 1)
        self.label = label
        self.logger = logger
    }

    /// A new stream that starts with `first`, if given, then gets every later element.
    package func makeStream(startingWith first: Element? = nil) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream.makeStream(of: Element.self, bufferingPolicy: .bufferingOldest(limit))
        let id: UInt64? = state.withLockedValue { state in
            guard !state.finished else { return nil }
            state.nextID += 1
            state.continuations[state.nextID] = continuation
            if let first { continuation.yield(first) }
            return state.nextID
        }
        guard let id else {
            if let first { continuation.yield(first) }
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLockedValue { _ = $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    /// Sends `element` to every consumer. Elements are queued under the lock, so every consumer
    /// sees them in the same order.
    package func yield(_ element: Element) {
        let total = state.withLockedValue { state -> Int? in
            var dropped = 0
            for continuation in state.continuations.values {
                if case .dropped = continuation.yield(element) { dropped += 1 }
            }
            guard dropped > 0 else { return nil }
            let before = state.dropped
            state.dropped += dropped
            // log the first drop, then once per 10,000
            return before == 0 || before / 10_000 != state.dropped / 10_000 ? state.dropped : nil
        }
        if let total {
            logger.warning(
                "a consumer is not reading its stream: elements dropped",
                metadata: ["stream": "\(label)", "dropped so far": "\(total)", "buffer limit": "\(limit)"]
            )
        }
    }

    /// Ends every stream; later consumers get an empty one.
    package func finish() {
        let continuations = state.withLockedValue { state in
            state.finished = true
            defer { state.continuations = [:] }
            return Array(state.continuations.values)
        }
        for continuation in continuations { continuation.finish() }
    }

    /// How many elements were dropped for consumers whose buffer was full.
    package var droppedCount: Int { state.withLockedValue { $0.dropped } }
}
