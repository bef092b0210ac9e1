import DuplexChat
import DuplexSchema
import DuplexWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO

/// Messages: each queued for the next batch, appended in one transaction, numbered per room,
/// and answered once committed.
extension PostgresChatStore {
    /// A member's message, queued for the next batch at once, on the member's event loop: a
    /// member's messages are numbered in the order it sent them. The answer completes on `loop`.
    func record(
        _ say: ChatSay,
        in room: ChatRoom,
        from name: String,
        token: String,
        matchByName: Bool,
        on loop: any EventLoop
    ) -> StoreAnswer<Result<ChatRoom.SayResult, any Error>> {
        let prepared: PreparedSay
        do {
            prepared = try prepare(say, in: room, from: name, token: token, matchByName: matchByName)
        } catch {
            return .now(.failure(error))
        }
        let promise = loop.makePromise(of: Result<ChatRoom.SayResult, any Error>.self)
        batcher.enqueue(prepared.item) { outcome in
            // Applied here, in the batch's order: the replica gets the room's events in seq order.
            let committed = self.apply(prepared, outcome, to: room)
            // Usually the replica has the message already (it was applied just now, or a
            // notification brought it): answered at once, with no task.
            if let answered = self.answerNow(committed, in: room) {
                return promise.succeed(answered)
            }
            promise.completeWithTask {
                do {
                    return .success(try await self.answer(committed, in: room))
                } catch {
                    return .failure(error)
                }
            }
        }
        return .later(promise.futureResult)
    }

    /// The answer to a committed message when it needs no wait: a failure, or a message the
    /// replica has applied. Nil while the replica is behind (``answer(_:in:)`` waits then).
    private func answerNow(_ committed: Result<ChatRoom.SayResult, any Error>, in room: ChatRoom) -> Result<ChatRoom.SayResult, any Error>? {
        switch committed {
        case .failure:
            return committed
        case .success(.accepted(let seq)), .success(.duplicate(let seq)):
            return room.latestSeq >= seq ? committed : nil
        }
    }

    /// A message ready to be numbered: its JSON around the seq and its idempotency keys.
    struct PreparedSay: Sendable {
        var item: PostgresSayBatcher.Item
    }

    private func prepare(_ say: ChatSay, in room: ChatRoom, from name: String, token: String, matchByName: Bool) throws -> PreparedSay {
        let roomName = room.name
        let sentAt = Date()
        let template = try Self.template { seq in RoomEvent.messageFrame(room: roomName, seq: seq, say, from: name, at: sentAt) }
        let keys = RoomEvent.DedupeKeys(say, from: name, token: token)
        return PreparedSay(
            item: .init(
                room: roomName,
                prefix: template.prefix,
                suffix: template.suffix,
                tokenKey: keys.byToken,
                nameKey: keys.byName,
                matchByName: matchByName
            )
        )
    }

    /// After the commit: a new message goes into the local replica at once (called in the
    /// batch's order, so the replica gets the room's events in seq order).
    private func apply(_ prepared: PreparedSay, _ outcome: Result<PostgresSayBatcher.Outcome, any Error>, to room: ChatRoom) -> Result<
        ChatRoom.SayResult, any Error
    > {
        let item = prepared.item
        let recorded: PostgresSayBatcher.Outcome
        do {
            recorded = try outcome.get()
        } catch {
            // Whatever went wrong, the message is not known to be recorded: the member must not
            // get an error frame (its client would drop the message) but a reason to resend.
            return .failure(error as? ChatStoreUnavailable ?? ChatStoreUnavailable(description: Self.describe(error)))
        }
        guard case .recorded(let seq, let duplicate) = recorded else {
            forget(room)
            return .failure(ChatStoreUnavailable(description: "duplex: no room \(item.room) in the database"))
        }
        if duplicate { return .success(.duplicate(seq: seq)) }
        let json = item.prefix + String(seq) + item.suffix
        let event = RoomEvent(seq: seq, type: "message", json: json, epoch: room.epoch, dedupeKeys: [item.tokenKey, item.nameKey])
        // Past the next seq: other servers' events before it are on their way (notifications
        // arrive in commit order), and this one with them; the heartbeat catches up any lost.
        room.apply([event])
        return .success(.accepted(seq: seq))
    }

    /// The answer to a committed message, once the replica has it: the ack goes after the
    /// message.
    private func answer(_ committed: Result<ChatRoom.SayResult, any Error>, in room: ChatRoom) async throws -> ChatRoom.SayResult {
        let result = try committed.get()
        let seq: Int
        switch result {
        case .accepted(let number), .duplicate(let number): seq = number
        }
        guard await room.waitUntilApplied(seq, timeout: configuration.queryTimeout) else {
            requestCatchUp(room.name)
            throw ChatStoreUnavailable(
                description: "message \(seq) was recorded but did not come back from the store within \(configuration.queryTimeout)")
        }
        return result
    }

    /// Records a batch of messages in one transaction (``PostgresSayBatcher``): one outcome per
    /// message, in order.
    func commit(_ whole: [PostgresSayBatcher.Item]) async throws -> [PostgresSayBatcher.Outcome] {
        // A message said twice in one batch (a resend that caught up with its original) is sent
        // once; the other is answered as its duplicate.
        let (batch, sameAs) = Self.resolvingDuplicates(whole)
        let outcomes = try await commitDistinct(batch)
        var answered: [PostgresSayBatcher.Outcome] = []
        var distinct = outcomes.makeIterator()
        for index in whole.indices {
            if let original = sameAs[index] {
                guard case .recorded(let seq, _) = answered[original] else {
                    answered.append(answered[original])
                    continue
                }
                answered.append(.recorded(seq: seq, duplicate: true))
            } else {
                answered.append(distinct.next() ?? .roomMissing)
            }
        }
        return answered
    }

    /// The batch without its repeats, and for each repeat the index of the earlier message it
    /// repeats (the same room, and the same token key, or the same name key when it matches by
    /// name: what `duplex_append_batch` would find in `duplex_dedupe`).
    static func resolvingDuplicates(_ batch: [PostgresSayBatcher.Item]) -> ([PostgresSayBatcher.Item], [Int: Int]) {
        var byToken: [String: Int] = [:]
        var byName: [String: Int] = [:]
        var distinct: [PostgresSayBatcher.Item] = []
        var sameAs: [Int: Int] = [:]
        for (index, item) in batch.enumerated() {
            let tokenKey = item.room + "\n" + item.tokenKey
            let nameKey = item.room + "\n" + item.nameKey
            if let original = byToken[tokenKey] ?? (item.matchByName ? byName[nameKey] : nil) {
                sameAs[index] = original
                continue
            }
            byToken[tokenKey] = byToken[tokenKey] ?? index
            byName[nameKey] = byName[nameKey] ?? index
            distinct.append(item)
        }
        return (distinct, sameAs)
    }

    private func commitDistinct(_ batch: [PostgresSayBatcher.Item]) async throws -> [PostgresSayBatcher.Outcome] {
        let statement = AppendBatchStatement(batch, keep: keep)
        return try await withDeadline("recording \(batch.count) message\(batch.count == 1 ? "" : "s")") {
            try await self.client.withConnection { connection in
                // On the connection's loop: the statement, its rows and the commit's confirmation
                // take no hop between threads (each hop from the loop to a task and back cost
                // about 0.7 ms at the median, measured on the wire at ten messages a second).
                try await withJobs(on: connection.eventLoop) {
                    let rows = try await connection.execute(statement, logger: self.logger)
                    var outcomes = [PostgresSayBatcher.Outcome?](repeating: nil, count: batch.count)
                    for try await (index, seq, duplicate) in rows where (1...batch.count).contains(index) {
                        outcomes[index - 1] = seq.map { .recorded(seq: $0, duplicate: duplicate) } ?? .roomMissing
                    }
                    let answered = outcomes.compactMap { $0 }
                    guard answered.count == batch.count else {
                        throw ChatStoreUnavailable(description: "duplex_append_batch answered \(answered.count) of \(batch.count) messages")
                    }
                    try await Self.committed(on: connection, logger: self.logger)
                    return answered
                }
            }
        }
    }

    /// Returns once the statement just run on `connection` is committed. Its rows end with its
    /// CommandComplete, which PostgreSQL sends before it commits the implicit transaction at the
    /// Sync that follows; a query queued behind it is answered only after that commit (durable,
    /// with `synchronous_commit = on`). So nothing is acknowledged or delivered before it is
    /// recorded.
    ///
    /// A commit that fails (a deferred constraint, say) sends its error after that
    /// CommandComplete, and postgres-nio closes the connection on it. A query written to a channel
    /// that is closed already is dropped without an answer, so the check and the write are made
    /// together on the connection's event loop: the wait fails at once instead of at the deadline.
    static func committed(on connection: PostgresConnection, logger: Logger) async throws {
        let confirm = { @Sendable () -> EventLoopFuture<Void> in
            guard !connection.isClosed else {
                return connection.eventLoop.makeFailedFuture(
                    ChatStoreUnavailable(description: "the commit was not confirmed: the database connection closed (a commit that fails closes it)")
                )
            }
            // On the event loop, the query reaches postgres-nio's handler at once: it is answered,
            // or failed when the connection closes.
            return connection.query("SELECT 1", logger: logger).map { _ in }
        }
        let loop = connection.eventLoop
        try await (loop.inEventLoop ? confirm() : loop.flatSubmit(confirm)).get()
    }
}
