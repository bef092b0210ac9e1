import DuplexChat
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
