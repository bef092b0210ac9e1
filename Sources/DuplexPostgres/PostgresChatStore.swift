import DuplexChat
import DuplexServer
import DuplexSchema
import DuplexWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import PostgresNIO

/// Chat rooms kept in PostgreSQL and served by every `duplex-server` on the same database.
///
/// - **Numbering.** Every event (message, `joined`, `left`) is numbered and recorded by
///   `duplex_append` under the room row's lock: seqs are gap-free, strictly increasing and
///   committed in order across all servers. A `say` is acknowledged only once committed, and
///   its idempotency keys are recorded with it, so a `say` retried on any server is answered
///   with the original seq. Says are committed in batches (``PostgresSayBatcher``): those that
///   arrive while one commit is in flight go together in the next, `duplex_append_batch`.
/// - **Fan-out.** Each server listens on `duplex_events`. A notification carries the event
///   (or only its room and seq when it is too big); a server applies it to its local replica of
///   the room (a ``ChatRoom`` with ``RoomLedger/Sequencing-swift.enum/external`` numbering), which
///   queues it to the subscribers on that server. A replica applies events strictly in seq order:
///   an event past the next one means some were missed, and the replica fetches them from
///   `duplex_events` first. After its listening connection comes back, and on every heartbeat,
///   a server compares each replica with the room's latest seq and catches up the same way.
/// - **Presence.** Members are rows in `duplex_members`, unique by name per room. A join with the
///   member's resume token replaces its older connection wherever it is (the server holding it
///   applies the `left` event and closes it with 4001). Each server renews a lease every
///   ``PostgresStoreConfiguration/heartbeatInterval``; the members of a server whose lease ran
///   out (killed, or cut off from the database) are removed with `left` events by the others.
/// - **Failures.** A query that fails or takes longer than
///   ``PostgresStoreConfiguration/queryTimeout`` is not retried silently: a join is refused
///   (`store_unavailable`, 1013; HTTP 503 for a room stream), and a member whose `say` could not
///   be recorded is closed with 1013, unacknowledged, so that its client rejoins and resends it
///   (deduplicated if it was recorded after all).
final class PostgresChatStore: ChatStore {
    let configuration: PostgresStoreConfiguration
    /// This server's id in `duplex_nodes`: new for every process.
    let node: String
    let client: PostgresClient
    let logger: Logger
    /// Where commits, reconnections and catch-ups are counted (`GET /metrics`).
    let metrics: ChatMetrics.Store
    let historyLimit: Int
    let historyBytesLimit: Int
    let maxRooms: Int
    let budget: HistoryBudget
    /// Events kept in `duplex_events` per room: the history limit, and at least 100 so that a
    /// server that missed notifications can catch up.
    let keep: Int
    let prepared: (stream: AsyncStream<Void>, continuation: AsyncStream<Void>.Continuation)
    /// Signalled when ``run()`` starts the client: queries before that only wait, with a warning.
    let clientRunning: (stream: AsyncStream<Void>, continuation: AsyncStream<Void>.Continuation)

    enum Replica {
        case loading(Task<ChatRoom, any Error>)
        case loaded(ChatRoom)
    }

    struct State {
        var replicas: [String: Replica] = [:]
        /// Rooms being caught up, and whether another catch-up was asked for meanwhile.
        var catchingUp: [String: Bool] = [:]
        var listening = false
        var outageStarted: ContinuousClock.Instant?
        /// When the listening connection last came up.
        var listeningSince: ContinuousClock.Instant?
        var reconnections = 0
        var lastError: String?
        var caughtUpEvents = 0
    }

    let state = NIOLockedValueBox(State())
    /// The says waiting for the next group commit.
    let batcher = PostgresSayBatcher()
    /// The database's clock, which notifications carry.
    let clock = DatabaseClock()

    init(
        configuration: PostgresStoreConfiguration,
        historyLimit: Int,
        historyBytesLimit: Int,
        totalHistoryBytesLimit: Int,
        maxRooms: Int,
        logger: Logger,
        metrics: ChatMetrics.Store
    ) {
        self.configuration = configuration
        self.metrics = metrics
        self.node = randomBase64URL(bytes: 9)
        self.logger = logger
        self.historyLimit = max(historyLimit, 0)
        self.historyBytesLimit = historyBytesLimit
        self.maxRooms = max(maxRooms, 1)
        self.budget = HistoryBudget(limit: totalHistoryBytesLimit)
        self.keep = max(historyLimit, 100)
        var clientConfiguration = PostgresClient.Configuration(
            host: configuration.host,
            port: configuration.port,
            username: configuration.username,
            password: configuration.password,
            database: configuration.database,
            tls: configuration.requireTLS ? .require(.makeClientConfiguration()) : .disable
        )
        clientConfiguration.options.maximumConnections = configuration.maxConnections
        clientConfiguration.options.minimumConnections = 1
        clientConfiguration.options.connectTimeout = configuration.queryTimeout
        self.client = PostgresClient(configuration: clientConfiguration, backgroundLogger: logger)
        self.prepared = AsyncStream<Void>.makeStream()
        self.clientRunning = AsyncStream<Void>.makeStream()
    }

    // MARK: Lifecycle

    func prepare() async throws {
        let clock = ContinuousClock()
        let deadline = clock.now + configuration.startupTimeout
        var attempt = 0
        for await _ in clientRunning.stream { break }
        while true {
            do {
                try await withDeadline("migrating the schema") {
                    try await self.client.withTransaction(logger: self.logger) { connection in
                        try await PostgresChatSchema.migrate(connection, logger: self.logger)
                    }
                }
                try await renewLease()
                break
            } catch {
                // postgres-nio wraps what the transaction's closure threw.
                if let newer = (error as? PostgresChatSchema.NewerSchema)
                    ?? ((error as? PostgresTransactionError)?.closureError as? PostgresChatSchema.NewerSchema)
                {
                    throw ChatStoreUnavailable(description: "the room store at \(configuration.redactedURL) cannot be used: \(newer)")
                }
                attempt += 1
                guard clock.now < deadline else {
                    throw ChatStoreUnavailable(
                        description:
                            "cannot reach the room store at \(configuration.redactedURL) within \(configuration.startupTimeout): \(Self.describe(error))"
                    )
                }
                if attempt == 1 {
                    logger.warning(
                        "the room store is not reachable yet; trying again",
                        metadata: ["store": "\(configuration.redactedURL)", "error": "\(Self.describe(error))"])
                }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
        logger.notice(
            "room store ready", metadata: ["store": "\(configuration.redactedURL)", "node": "\(node)", "schema": "\(PostgresChatSchema.version)"])
        prepared.continuation.yield()
        prepared.continuation.finish()
    }

    func run() async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                self.clientRunning.continuation.yield()
                self.clientRunning.continuation.finish()
                await self.client.run()
            }
            group.addTask {
                for await _ in self.prepared.stream { break }
                guard !Task.isCancelled else { return }
                await withDiscardingTaskGroup { group in
                    group.addTask { await self.listen() }
                    group.addTask { await self.heartbeat() }
                    group.addTask {
                        await self.batcher.run { items in
                            let start = ContinuousClock.now
                            defer { self.metrics.committed(messages: items.count, in: ContinuousClock.now - start) }
                            return try await self.commit(items)
                        }
                    }
                }
            }
        }
    }

    var roomCount: Int { state.withLockedValue { $0.replicas.count } }
    var historyBytes: Int { budget.bytes }

    var healthJSON: String {
        let (listening, reconnections, lastError, caughtUp, rooms) = state.withLockedValue {
            ($0.listening, $0.reconnections, $0.lastError, $0.caughtUpEvents, $0.replicas.count)
        }
        // Bounded: the database's message can be long.
        let error = lastError.map { #","lastError":\#(Self.jsonString(String($0.prefix(300))))"# } ?? ""
        let (batches, batched, largest) = batcher.counts
        return
            #"{"kind":"postgres","node":"\#(node)","listening":\#(listening),"reconnections":\#(reconnections),"caughtUpEvents":\#(caughtUp),"rooms":\#(rooms),"commits":{"batches":\#(batches),"messages":\#(batched),"largest":\#(largest)}\#(error)}"#
    }

    // MARK: ChatStore

    /// A join waits on the database (the room's replica, the member's row): the answer
    /// completes on `loop`.
    func join(
        room name: String,
        _ subscriber: RoomSubscriber,
        since: Int?,
        epoch: String?,
        deliverBacklog: Bool,
        prelude: Prelude?,
        on loop: any EventLoop
    ) -> StoreAnswer<Result<(ChatRoom, ChatRoom.Subscription), ChatStoreRefusal>> {
        .later(
            loop.makeFutureWithTask {
                await self.subscribe(room: name, subscriber, since: since, epoch: epoch, deliverBacklog: deliverBacklog, prelude: prelude)
            })
    }

    /// A connection leaves: no event reaches it after this returns; a member's departure is
    /// recorded in the background (its queries have the store's deadline).
    func leave(_ subscription: ChatRoom.Subscription, member: RoomSubscriber.Member?, from room: ChatRoom) {
        room.unsubscribe(subscription.id)
        guard let member else { return }
        Task { await self.recordDeparture(of: member, from: room) }
    }

    /// Subscribes to the room's replica, loading it if need be; a member's join is recorded.
    private func subscribe(
        room name: String,
        _ subscriber: RoomSubscriber,
        since: Int?,
        epoch: String?,
        deliverBacklog: Bool,
        prelude: Prelude?
    ) async -> Result<(ChatRoom, ChatRoom.Subscription), ChatStoreRefusal> {
        while true {
            let room: ChatRoom
            do {
                room = try await replica(name)
            } catch let refusal as ChatStoreRefusal {
                return .failure(refusal)
            } catch {
                return .failure(.unavailable(Self.describe(error)))
            }
            switch room.subscribe(subscriber, since: since, epoch: epoch, deliverBacklog: deliverBacklog, prelude: prelude) {
            case .failure(.evicted):
                state.withLockedValue { state in
                    if case .loaded(let held) = state.replicas[name], held === room { state.replicas[name] = nil }
                }
                continue
            case .failure(.nameTaken):
                return .failure(.nameTaken)
            case .success(var subscription):
                guard let member = subscriber.member else { return .success((room, subscription)) }
                do {
                    subscription.members = try await join(room: name, member: member)
                    return .success((room, subscription))
                } catch  where NameTaken.isCause(of: error) {
                    room.unsubscribe(subscription.id)
                    return .failure(.nameTaken)
                } catch {
                    room.unsubscribe(subscription.id)
                    if Self.isMissingRoom(error) { forget(room) }
                    // The join may have been recorded after all: the heartbeat's reconciliation
                    // removes a member row whose connection is not here.
                    return .failure(.unavailable(Self.describe(error)))
                }
            }
        }
    }

    /// Records that `member` left `room`; a failure is logged, and the next heartbeat records it.
    private func recordDeparture(of member: RoomSubscriber.Member, from room: ChatRoom) async {
        do {
            try await leave(room: room.name, name: member.name, session: member.session, cause: "left")
        } catch {
            logger.warning(
                "could not record a departure; the next heartbeat will",
                metadata: ["room": "\(room.name)", "name": "\(member.name)", "error": "\(Self.describe(error))"]
            )
        }
    }

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

    func canHost(_ name: String) -> Bool {
        state.withLockedValue { state in
            state.replicas[name] != nil || state.replicas.count < maxRooms
                || state.replicas.values.contains { if case .loaded(let room) = $0 { room.idleSince != nil } else { false } }
        }
    }

    func forgetAll() {
        let rooms = state.withLockedValue { state in
            defer { state.replicas = [:] }
            return state.replicas.values.compactMap { if case .loaded(let room) = $0 { room } else { nil } }
        }
        for room in rooms { _ = room.evictIfEmpty(force: true) }
    }

    // MARK: Helpers

    /// A frame's JSON split around its seq, so that `duplex_append` can number it:
    /// `prefix + String(seq) + suffix` is the frame with that seq.
    static func template(_ frame: (Int) -> ChatServerFrame) throws -> (prefix: String, suffix: String) {
        let placeholder = 9_007_199_254_740_991
        let json = try frame(placeholder).jsonString()
        let marker = Array(#""seq":\#(placeholder)"#.utf8)
        let bytes = Array(json.utf8)
        guard let start = Self.firstIndex(of: marker, in: bytes, from: 0),
            Self.firstIndex(of: marker, in: bytes, from: start + marker.count) == nil
        else {
            throw ChatStoreUnavailable(description: "a frame could not be prepared for numbering")
        }
        let seqStart = start + #""seq":"#.utf8.count
        return (String(decoding: bytes[..<seqStart], as: UTF8.self), String(decoding: bytes[(start + marker.count)...], as: UTF8.self))
    }

    /// Where `needle` first occurs in `bytes` at or after `from` (on the UTF-8 bytes: Foundation's
    /// `range(of:)` bridges to `NSString` and costs several times as much per `say`).
    private static func firstIndex(of needle: [UInt8], in bytes: [UInt8], from: Int) -> Int? {
        guard let first = needle.first, bytes.count >= needle.count else { return nil }
        var index = from
        while index <= bytes.count - needle.count {
            if bytes[index] == first, bytes[index..<(index + needle.count)].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }

    /// Runs `operation`, failing with ``ChatStoreUnavailable`` if it takes longer than the query
    /// timeout; the operation is cancelled then, and not waited for (a server that stopped
    /// answering may not let it end).
    @discardableResult
    func withDeadline<T: Sendable>(_ what: String, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        let limit = configuration.queryTimeout
        return try await DuplexWire.withDeadline(
            limit,
            onDeadline: .cancelAndAbandon,
            orThrow: { ChatStoreUnavailable(description: "\(what) took longer than \(limit)") },
            operation
        )
    }

    /// A short description of a PostgreSQL error: the server's message when there is one.
    static func describe(_ error: any Error) -> String {
        if let transaction = error as? PostgresTransactionError,
            let inner = transaction.closureError ?? transaction.beginError ?? transaction.commitError
        {
            return describe(inner)
        }
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return "PostgreSQL: \(message)" }
            return "PostgreSQL: \(error.code)\(error.underlying.map { " (\($0))" } ?? "")"
        }
        return String(describing: error)
    }

    static func jsonString(_ text: String) -> String {
        (try? String(decoding: JSONEncoder().encode(text), as: UTF8.self)) ?? "\"\""
    }
}
