import DuplexChat
import NIOConcurrencyHelpers
import NIOCore

/// Group commit for the PostgreSQL store: the messages members say wait here, and one loop per
/// server records them, as many as arrived while the previous batch was committing, in one
/// transaction (`duplex_append_batch`): one round trip and one WAL flush for the whole batch.
///
/// - **Order.** One batch is in flight at a time, and a batch keeps the order of arrival, so a
///   member's messages are numbered in the order it sent them.
/// - **Nothing acknowledged that was not recorded.** Each sender is answered once the commit that
///   holds its message is done. When a commit fails, or takes longer than the store's query
///   timeout, its messages are not known to be recorded: they fail, and so does everything queued
///   behind them, so that no later message of a sender is recorded before an earlier one that it
///   will resend (a resend of one recorded after all is answered as a duplicate).
/// - **Bounded.** A batch holds at most ``Limits/maxCount`` messages and ``Limits/maxBytes`` bytes
///   of JSON. The queue is bounded by the senders: each member has at most
///   ``ChatMemberService/maxSaysInFlight`` messages waiting, after which its connection is not
///   read (backpressure through TCP).
final class PostgresSayBatcher: Sendable {
    /// A message to record.
    struct Item: Sendable {
        var room: String
        /// The frame's JSON around its seq (`prefix + seq + suffix`).
        var prefix: String
        var suffix: String
        /// The idempotency key of the member's token, and of its name.
        var tokenKey: String
        var nameKey: String
        /// Whether a message recorded under the name's key counts as the same message.
        var matchByName: Bool

        var bytes: Int { prefix.utf8.count + suffix.utf8.count + tokenKey.utf8.count + nameKey.utf8.count }
    }

    /// What the store answered for one message.
    enum Outcome: Sendable, Equatable {
        /// Numbered (and recorded, unless `duplicate`: then `seq` is the original's).
        case recorded(seq: Int, duplicate: Bool)
        /// The room is not in the database (wiped, or restored from an older backup).
        case roomMissing
    }

    /// How big one batch may be.
    struct Limits: Sendable {
        var maxCount = 256
        var maxBytes = 512 * 1024
    }

    private struct Waiting {
        var item: Item
        var answer: @Sendable (Result<Outcome, any Error>) -> Void
    }

    private struct State {
        var queue = CircularBuffer<Waiting>()
        var stopped = false
        /// Batches committed, and messages in them (for `/health` and tests).
        var batches = 0
        var messages = 0
        var largest = 0
    }

    private let state = NIOLockedValueBox(State())
    private let wakeups: (stream: AsyncStream<Void>, continuation: AsyncStream<Void>.Continuation)
    let limits: Limits

    init(limits: Limits = .init()) {
        self.limits = limits
        self.wakeups = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    /// Queues `item` for the next batch, at once (so that messages are numbered in the order
    /// they are queued), and calls `answer` once the commit that holds it is done: with the
    /// commit's error, or ``ChatStoreUnavailable`` once the store stopped.
    func enqueue(_ item: Item, answer: @escaping @Sendable (Result<Outcome, any Error>) -> Void) {
        let queued = state.withLockedValue { state in
            guard !state.stopped else { return false }
            state.queue.append(Waiting(item: item, answer: answer))
            return true
        }
        if queued {
            wakeups.continuation.yield()
        } else {
            answer(.failure(ChatStoreUnavailable(description: "the room store stopped")))
        }
    }

    /// Commits batches with `commit` until cancelled; then fails whatever is still queued.
    /// `commit` returns one outcome per item, in order, or throws.
    func run(commit: @escaping @Sendable ([Item]) async throws -> [Outcome]) async {
        for await _ in wakeups.stream {
            while let batch = takeBatch() {
                let outcomes: [Outcome]
                do {
                    outcomes = try await commit(batch.map(\.item))
                    guard outcomes.count == batch.count else {
                        throw ChatStoreUnavailable(description: "the store answered \(outcomes.count) of \(batch.count) messages")
                    }
                } catch {
                    let behind = state.withLockedValue { state in
                        defer { state.queue.removeAll() }
                        return Array(state.queue)
                    }
                    for waiting in batch + behind { waiting.answer(.failure(error)) }
                    continue
                }
                state.withLockedValue { state in
                    state.batches += 1
                    state.messages += batch.count
                    state.largest = max(state.largest, batch.count)
                }
                // The batch's messages reach each member of a room together (one write).
                ChatRoom.applyingTogether {
                    for (waiting, outcome) in zip(batch, outcomes) { waiting.answer(.success(outcome)) }
                }
            }
        }
        let left = state.withLockedValue { state in
            state.stopped = true
            defer { state.queue.removeAll() }
            return Array(state.queue)
        }
        for waiting in left { waiting.answer(.failure(ChatStoreUnavailable(description: "the room store stopped"))) }
    }

    /// The next batch: the oldest waiting messages, within the limits (at least one).
    private func takeBatch() -> [Waiting]? {
        state.withLockedValue { state in
            guard !state.queue.isEmpty else { return nil }
            var batch: [Waiting] = []
            var bytes = 0
            while let next = state.queue.first, batch.count < limits.maxCount {
                let size = next.item.bytes
                if !batch.isEmpty, bytes + size > limits.maxBytes { break }
                batch.append(state.queue.removeFirst())
                bytes += size
            }
            return batch
        }
    }

    /// Batches committed, messages recorded in them, and the largest batch so far.
    var counts: (batches: Int, messages: Int, largest: Int) {
        state.withLockedValue { ($0.batches, $0.messages, $0.largest) }
    }
}
