import DuplexSchema
import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// Chat rooms kept in PostgreSQL and served by every `duplex-server` on the same database.
///
/// - **Numbering.** Every event (message, `joined`, `left`) is numbered and recorded by
///   `duplex_append` under the room row's lock: seqs are gap-free, strictly increasing and
///   committed in order across all servers. A `say` is acknowledged only once committed, and
///   its idempotency keys are recorded with it, so a `say` retried on any server is answered
///   with the original seq.
/// - **Fan-out.** Each server listens on `duplex_events`. A notification carries the event
///   (or only its room and seq when it is too big); a server applies it to its local replica of
///   the room (a ``ChatRoom`` with ``ChatRoom/Sequencing-swift.enum/external`` numbering), which
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
    private let client: PostgresClient
    private let logger: Logger
    private let historyLimit: Int
    private let historyBytesLimit: Int
    private let maxRooms: Int
    private let budget: HistoryBudget
    /// Events kept in `duplex_events` per room: the history limit, and at least 100 so that a
    /// server that missed notifications can catch up.
    private let keep: Int
    private let prepared: (stream: AsyncStream<Void>, continuation: AsyncStream<Void>.Continuation)
    /// Signalled when ``run()`` starts the client: queries before that only wait, with a warning.
    private let clientRunning: (stream: AsyncStream<Void>, continuation: AsyncStream<Void>.Continuation)

    private enum Replica {
        case loading(Task<ChatRoom, any Error>)
        case loaded(ChatRoom)
    }

    private struct State {
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

    private let state = NIOLockedValueBox(State())

    init(configuration: PostgresStoreConfiguration, historyLimit: Int, historyBytesLimit: Int, totalHistoryBytesLimit: Int, maxRooms: Int, logger: Logger) {
        self.configuration = configuration
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
                attempt += 1
                guard clock.now < deadline else {
                    throw ChatStoreUnavailable(description: "cannot reach the room store at \(configuration.redactedURL) within \(configuration.startupTimeout): \(Self.describe(error))")
                }
                if attempt == 1 {
                    logger.warning("the room store is not reachable yet; trying again", metadata: ["store": "\(configuration.redactedURL)", "error": "\(Self.describe(error))"])
                }
                try await Task.sleep(for: .milliseconds(200))
            }
        }
        logger.notice("room store ready", metadata: ["store": "\(configuration.redactedURL)", "node": "\(node)", "schema": "\(PostgresChatSchema.version)"])
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
                }
            }
        }
    }

    var healthJSON: String {
        let (listening, reconnections, lastError, caughtUp, rooms) = state.withLockedValue {
            ($0.listening, $0.reconnections, $0.lastError, $0.caughtUpEvents, $0.replicas.count)
        }
        // Bounded: the database's message can be long.
        let error = lastError.map { #","lastError":\#(Self.jsonString(String($0.prefix(300))))"# } ?? ""
        return #"{"kind":"postgres","node":"\#(node)","listening":\#(listening),"reconnections":\#(reconnections),"caughtUpEvents":\#(caughtUp),"rooms":\#(rooms)\#(error)}"#
    }

    // MARK: ChatStore

    func subscribe(
        room name: String,
        _ subscriber: RoomSubscriber,
        since: Int?,
        epoch: String?,
        deliverBacklog: Bool,
        prelude: ((_ recovered: Bool?, _ epoch: String, _ latestSeq: Int) -> Void)?
    ) async -> Result<(ChatRoom, ChatRoom.Subscription), ChatRooms.Refusal> {
        while true {
            let room: ChatRoom
            do {
                room = try await replica(name)
            } catch let refusal as ChatRooms.Refusal {
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
                } catch where NameTaken.isCause(of: error) {
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

    func unsubscribe(_ subscription: ChatRoom.Subscription, member: RoomSubscriber.Member?, from room: ChatRoom) async {
        room.unsubscribe(subscription.id)
        guard let member else { return }
        do {
            try await leave(room: room.name, name: member.name, session: member.session, cause: "left")
        } catch {
            logger.warning(
                "could not record a departure; the next heartbeat will",
                metadata: ["room": "\(room.name)", "name": "\(member.name)", "error": "\(Self.describe(error))"]
            )
        }
    }

    func say(_ say: ChatSay, in room: ChatRoom, from name: String, token: String, matchByName: Bool) async throws -> ChatRoom.SayResult {
        let byToken = "t\n\(token)\n\(say.clientMessageID)"
        let byName = "n\n\(name)\n\(say.clientMessageID)"
        let roomName = room.name
        let template = try Self.template { seq in
            .message(ChatMessage(room: roomName, seq: seq, clientMessageID: say.clientMessageID, from: name, text: say.text, sentAt: Date()))
        }
        let lookup = matchByName ? [byToken, byName] : [byToken]
        let keys = [byToken, byName]
        let keep = self.keep
        let seq: Int
        let duplicate: Bool
        do {
            (seq, duplicate) = try await withDeadline("recording a message") {
                let rows = try await self.client.query(
                    "SELECT o_seq, o_duplicate FROM duplex_append(\(roomName), 'message', \(template.prefix), \(template.suffix), \(lookup), \(keys), NULL, \(keep))",
                    logger: self.logger
                )
                for try await (seq, duplicate) in rows.decode((Int, Bool).self) { return (seq, duplicate) }
                throw ChatStoreUnavailable(description: "duplex_append returned no row")
            }
        } catch {
            if Self.isMissingRoom(error) { forget(room) }
            // Whatever went wrong, the message is not known to be recorded: the member must not
            // get an error frame (its client would drop the message) but a reason to resend.
            throw error as? ChatStoreUnavailable ?? ChatStoreUnavailable(description: Self.describe(error))
        }
        if !duplicate {
            let event = RoomEvent(seq: seq, type: "message", json: template.prefix + String(seq) + template.suffix, epoch: room.epoch, dedupeKeys: keys)
            if !room.apply([event]) { requestCatchUp(roomName) }
        }
        // The ack goes after the message: wait until the replica has it.
        guard await room.waitUntilApplied(seq, timeout: configuration.queryTimeout) else {
            requestCatchUp(roomName)
            throw ChatStoreUnavailable(description: "message \(seq) was recorded but did not come back from the store within \(configuration.queryTimeout)")
        }
        return duplicate ? .duplicate(seq: seq) : .accepted(seq: seq)
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

    // MARK: Replicas

    /// The local replica of a room, loaded from the database (and the room created there) when
    /// this server holds none.
    private func replica(_ name: String) async throws -> ChatRoom {
        let held: Replica = try state.withLockedValue { state in
            switch state.replicas[name] {
            case .loaded(let room):
                return .loaded(room)
            case .loading(let task):
                return .loading(task)
            case nil:
                if state.replicas.count >= maxRooms {
                    let idle = state.replicas.compactMap { entry -> (String, ContinuousClock.Instant)? in
                        guard case .loaded(let room) = entry.value, let since = room.idleSince else { return nil }
                        return (entry.key, since)
                    }
                    guard let oldest = idle.min(by: { $0.1 < $1.1 }), case .loaded(let room) = state.replicas[oldest.0], room.evictIfEmpty() else {
                        throw ChatRooms.Refusal.roomLimit
                    }
                    state.replicas[oldest.0] = nil
                }
                let task = Task { try await self.load(name) }
                state.replicas[name] = .loading(task)
                return .loading(task)
            }
        }
        let task: Task<ChatRoom, any Error>
        switch held {
        case .loaded(let room): return room
        case .loading(let loading): task = loading
        }
        do {
            let room = try await task.value
            state.withLockedValue { state in
                if case .loading = state.replicas[name] { state.replicas[name] = .loaded(room) }
            }
            return room
        } catch {
            state.withLockedValue { state in
                if case .loading = state.replicas[name] { state.replicas[name] = nil }
            }
            throw error
        }
    }

    /// Drops a replica whose room the database no longer has (the database was reset or
    /// restored from an older backup): its subscribers are closed (1013), and their rejoin
    /// creates the room again, in a new epoch, so that clients learn the history is gone.
    private func forget(_ room: ChatRoom) {
        let held = state.withLockedValue { state in
            guard case .loaded(let held) = state.replicas[room.name], held === room else { return false }
            state.replicas[room.name] = nil
            return true
        }
        guard held else { return }
        logger.error("the database no longer has this room (was it reset?); its members here rejoin in a new epoch", metadata: ["room": "\(room.name)"])
        room.restart(at: 0, with: [])
        _ = room.evictIfEmpty(force: true)
    }

    private static func isMissingRoom(_ error: any Error) -> Bool {
        String(describing: error).contains("duplex: no room")
    }

    private func loadedReplica(_ name: String) -> ChatRoom? {
        state.withLockedValue { state in
            if case .loaded(let room) = state.replicas[name] { room } else { nil }
        }
    }

    private var loadedReplicas: [ChatRoom] {
        state.withLockedValue { state in
            state.replicas.values.compactMap { if case .loaded(let room) = $0 { room } else { nil } }
        }
    }

    private func load(_ name: String) async throws -> ChatRoom {
        let (epoch, latestSeq, events) = try await withDeadline("loading room \(name)") {
            try await self.client.execute(
                "INSERT INTO duplex_rooms (room, epoch) VALUES (\(name), \(ChatRoom.makeEpoch())) ON CONFLICT (room) DO NOTHING",
                logger: self.logger
            )
            var found: (String, Int)?
            for try await row in try await self.client.query("SELECT epoch, latest_seq FROM duplex_rooms WHERE room = \(name)", logger: self.logger).decode((String, Int).self) {
                found = row
            }
            guard let (epoch, latestSeq) = found else { throw ChatStoreUnavailable(description: "room \(name) vanished while loading") }
            let events = try await self.fetch(name, after: max(latestSeq - self.historyLimit, 0), epoch: epoch, limit: max(self.historyLimit, 1))
            return (epoch, latestSeq, events)
        }
        let room = ChatRoom(
            replicaOf: name,
            epoch: epoch,
            latestSeq: latestSeq,
            history: events.filter { $0.seq <= latestSeq },
            historyLimit: historyLimit,
            historyBytesLimit: historyBytesLimit,
            budget: budget
        )
        // Events committed while it loaded arrive by notification, or by this catch-up.
        requestCatchUp(name)
        return room
    }

    /// The events of a room after `seq`, in order.
    private func fetch(_ room: String, after seq: Int, epoch: String, limit: Int) async throws -> [RoomEvent] {
        let rows = try await client.query(
            "SELECT seq, type, json, cause FROM duplex_events WHERE room = \(room) AND seq > \(seq) ORDER BY seq LIMIT \(limit)",
            logger: logger
        )
        var events: [RoomEvent] = []
        for try await (seq, type, json, cause) in rows.decode((Int, String, String, String?).self) {
            events.append(Self.event(seq: seq, type: type, json: json, cause: cause, epoch: epoch))
        }
        return events
    }

    private static func event(seq: Int, type: String, json: String, cause: String?, epoch: String) -> RoomEvent {
        var departure: RoomEvent.Departure?
        if type == "left", let cause, !cause.isEmpty,
            case .left(let presence)? = try? ChatServerFrame.decode(Data(json.utf8))
        {
            departure = .init(session: presence.session, replaced: cause == "replaced")
        }
        return RoomEvent(seq: seq, type: type, json: json, epoch: epoch, departure: departure)
    }

    /// Brings a replica up to the room's latest seq from `duplex_events`; one catch-up per room
    /// at a time, and one more when asked again meanwhile.
    private func requestCatchUp(_ name: String) {
        let start = state.withLockedValue { state in
            if state.catchingUp[name] != nil {
                state.catchingUp[name] = true
                return false
            }
            state.catchingUp[name] = false
            return true
        }
        guard start else { return }
        Task {
            while true {
                do {
                    try await self.catchUp(name)
                } catch {
                    logger.warning("could not catch up a room; the next heartbeat tries again", metadata: ["room": "\(name)", "error": "\(Self.describe(error))"])
                }
                let again = state.withLockedValue { state in
                    if state.catchingUp[name] == true {
                        state.catchingUp[name] = false
                        return true
                    }
                    state.catchingUp[name] = nil
                    return false
                }
                if !again { return }
            }
        }
    }

    private func catchUp(_ name: String) async throws {
        guard let room = loadedReplica(name) else { return }
        let batch = 500
        while true {
            let after = room.latestSeq
            let events = try await withDeadline("catching up room \(name)") {
                try await self.fetch(name, after: after, epoch: room.epoch, limit: batch)
            }
            guard let first = events.first else { return }
            if first.seq > after + 1 {
                // The events in between were trimmed from the table: the subscribers here cannot
                // get them. They are closed (1013) and resume from what is kept.
                logger.warning("missed events are no longer kept; closing the room's subscribers here", metadata: ["room": "\(name)", "from": "\(after + 1)", "to": "\(first.seq - 1)"])
                room.restart(at: events.last?.seq ?? after, with: Array(events.suffix(historyLimit)))
            } else {
                room.apply(events)
            }
            state.withLockedValue { $0.caughtUpEvents += events.count }
            if events.count < batch { return }
        }
    }

    // MARK: Members

    /// Thrown inside the join's transaction when the name is present with another token and a
    /// live lease; it reaches the caller wrapped in `PostgresTransactionError`.
    struct NameTaken: Error {
        /// Whether `error` is a `NameTaken`, bare or as the closure error of a transaction.
        static func isCause(of error: any Error) -> Bool {
            if error is NameTaken { return true }
            if let transaction = error as? PostgresTransactionError, let inner = transaction.closureError { return isCause(of: inner) }
            return false
        }
    }

    /// Records a member's arrival: replaces an older connection of the same member (same token),
    /// or one of a server whose lease ran out; refuses a name present with another token.
    /// Returns the names present.
    private func join(room: String, member: RoomSubscriber.Member) async throws -> [String] {
        let leaseMilliseconds = Int(configuration.lease / .milliseconds(1))
        let keep = self.keep
        let node = self.node
        return try await withDeadline("recording a join") {
            try await self.client.withTransaction(logger: self.logger) { connection in
                try await connection.execute("SELECT 1 FROM duplex_rooms WHERE room = \(room) FOR UPDATE", logger: self.logger)
                let rows = try await connection.query(
                    """
                    SELECT m.session, m.token, (n.node IS NULL OR n.last_seen < now() - make_interval(secs => \(leaseMilliseconds) / 1000.0))
                    FROM duplex_members m LEFT JOIN duplex_nodes n ON n.node = m.node
                    WHERE m.room = \(room) AND m.name = \(member.name)
                    """,
                    logger: self.logger
                )
                var present: [(session: String, token: String, expired: Bool)] = []
                for try await row in rows.decode((String, String, Bool).self) { present.append(row) }
                for old in present {
                    guard old.token == member.token || old.expired else { throw NameTaken() }
                    let template = try Self.template { seq in .left(ChatPresence(room: room, seq: seq, name: member.name, session: old.session, at: Date())) }
                    let cause = old.token == member.token ? "replaced" : "expired"
                    try await connection.execute(
                        "SELECT duplex_leave(\(room), \(old.session), \(template.prefix), \(template.suffix), \(cause), \(keep))",
                        logger: self.logger
                    )
                }
                try await connection.execute(
                    "INSERT INTO duplex_members (session, room, name, token, node) VALUES (\(member.session), \(room), \(member.name), \(member.token), \(node))",
                    logger: self.logger
                )
                let template = try Self.template { seq in .joined(ChatPresence(room: room, seq: seq, name: member.name, session: member.session, at: Date())) }
                let noKeys: [String] = []
                try await connection.execute(
                    "SELECT o_seq FROM duplex_append(\(room), 'joined', \(template.prefix), \(template.suffix), \(noKeys), \(noKeys), NULL, \(keep))",
                    logger: self.logger
                )
                var names: [String] = []
                for try await name in try await connection.query("SELECT name FROM duplex_members WHERE room = \(room)", logger: self.logger).decode(String.self) {
                    names.append(name)
                }
                return names.sorted()
            }
        }
    }

    /// Records a member's departure, once: nothing happens when its row is gone already.
    private func leave(room: String, name: String, session: String, cause: String) async throws {
        let template = try Self.template { seq in .left(ChatPresence(room: room, seq: seq, name: name, session: session, at: Date())) }
        let keep = self.keep
        try await withDeadline("recording a departure") {
            try await self.client.execute(
                "SELECT duplex_leave(\(room), \(session), \(template.prefix), \(template.suffix), \(cause), \(keep))",
                logger: self.logger
            )
        }
    }

    // MARK: Background

    /// Listens for events on a connection of its own; after every reconnection, catches up
    /// every replica, since notifications sent meanwhile are lost.
    private func listen() async {
        var delay = Duration.milliseconds(100)
        let connectionConfiguration = PostgresConnection.Configuration(
            host: configuration.host,
            port: configuration.port,
            username: configuration.username,
            password: configuration.password,
            database: configuration.database,
            tls: configuration.requireTLS ? .require(try! .init(configuration: .makeClientConfiguration())) : .disable
        )
        while !Task.isCancelled {
            do {
                let connection = try await PostgresConnection.connect(configuration: connectionConfiguration, id: 0, logger: logger)
                // Closed however listening ends: a connection must be closed before it is released.
                let ended: Result<Void, any Error>
                do {
                    try await withTaskCancellationHandler {
                        try await connection.listen(on: PostgresChatSchema.channel) { notifications in
                            self.listening()
                            delay = .milliseconds(100)
                            for try await notification in notifications {
                                self.received(notification.payload)
                            }
                        }
                    } onCancel: {
                        connection.close()
                    }
                    ended = .success(())
                } catch {
                    ended = .failure(error)
                }
                try? await connection.close()
                try ended.get()
                if !Task.isCancelled { lost("the listening connection ended") }
            } catch {
                if !Task.isCancelled { lost(Self.describe(error)) }
            }
            guard (try? await Task.sleep(for: delay)) != nil else { return }
            delay = min(delay * 2, .seconds(2))
        }
    }

    private func listening() {
        let outage = state.withLockedValue { state -> Duration? in
            state.listening = true
            state.listeningSince = .now
            defer { state.outageStarted = nil }
            return state.outageStarted.map { ContinuousClock.now - $0 }
        }
        let rooms = loadedReplicas
        if let outage {
            logger.notice("database connection restored; catching up every room", metadata: ["down for": "\(outage)", "rooms": "\(rooms.count)"])
        }
        for room in rooms { requestCatchUp(room.name) }
    }

    private func lost(_ error: String) {
        let first = state.withLockedValue { state in
            let first = state.outageStarted == nil
            if first {
                state.outageStarted = .now
                state.reconnections += 1
            }
            state.listening = false
            state.listeningSince = nil
            state.lastError = error
            return first
        }
        if first {
            logger.error("lost the database connection; reconnecting (members cannot post until it is back)", metadata: ["store": "\(configuration.redactedURL)", "error": "\(error)"])
        }
    }

    /// Applies a notification `ROOM\tSEQ\tCAUSE\tTYPE[\tJSON]` to the room's replica, if this
    /// server holds one.
    private func received(_ payload: String) {
        let fields = payload.split(separator: "\t", maxSplits: 4, omittingEmptySubsequences: false)
        guard fields.count >= 4, let seq = Int(fields[1]) else {
            logger.warning("a notification that is not an event; ignored", metadata: ["payload": "\(payload.prefix(100))"])
            return
        }
        let name = String(fields[0])
        guard let room = loadedReplica(name) else { return }
        guard fields.count == 5, seq == room.latestSeq + 1 else {
            if seq > room.latestSeq { requestCatchUp(name) }
            return
        }
        let event = Self.event(seq: seq, type: String(fields[3]), json: String(fields[4]), cause: String(fields[2]), epoch: room.epoch)
        if !room.apply([event]) { requestCatchUp(name) }
    }

    /// Renews the lease; removes the members of servers whose lease ran out, and this server's
    /// member rows whose connection is gone; catches up replicas that fell behind.
    private func heartbeat() async {
        while !Task.isCancelled {
            guard (try? await Task.sleep(for: configuration.heartbeatInterval)) != nil else { return }
            do {
                try await renewLease()
                try await sweep()
                try await checkReplicas()
            } catch {
                logger.debug("heartbeat failed", metadata: ["error": "\(Self.describe(error))"])
            }
        }
    }

    private func renewLease() async throws {
        let node = self.node
        try await withDeadline("renewing the lease") {
            try await self.client.execute(
                "INSERT INTO duplex_nodes (node) VALUES (\(node)) ON CONFLICT (node) DO UPDATE SET last_seen = now()",
                logger: self.logger
            )
        }
    }

    private func sweep() async throws {
        let leaseMilliseconds = Int(configuration.lease / .milliseconds(1))
        let node = self.node
        let local = Set(loadedReplicas.flatMap(\.memberSessions))
        // After an outage every lease may have run out: give the other servers one lease to
        // renew theirs before removing their members.
        let settled = state.withLockedValue { $0.listeningSince.map { ContinuousClock.now - $0 >= configuration.lease } ?? false }
        let rows = try await withDeadline("finding departed members") {
            var rows: [(room: String, name: String, session: String, node: String, expired: Bool)] = []
            let query: PostgresQuery = """
                SELECT m.room, m.name, m.session, m.node, (n.node IS NULL OR n.last_seen < now() - make_interval(secs => \(leaseMilliseconds) / 1000.0))
                FROM duplex_members m LEFT JOIN duplex_nodes n ON n.node = m.node
                WHERE m.node = \(node) OR n.node IS NULL OR n.last_seen < now() - make_interval(secs => \(leaseMilliseconds) / 1000.0)
                """
            for try await row in try await self.client.query(query, logger: self.logger).decode((String, String, String, String, Bool).self) {
                rows.append(row)
            }
            return rows
        }
        for row in rows {
            if row.node == node {
                // Still here, or joining (a member is subscribed before its row is written).
                guard !local.contains(row.session) else { continue }
                // A departure that failed to be recorded, or a join that timed out after all.
                try await leave(room: row.room, name: row.name, session: row.session, cause: "left")
            } else if row.expired, settled {
                logger.notice("removing a member of a server whose lease ran out", metadata: ["room": "\(row.room)", "name": "\(row.name)", "server": "\(row.node)"])
                try await leave(room: row.room, name: row.name, session: row.session, cause: "expired")
            }
        }
        if settled {
            // Servers gone for good, whose members are all removed: forget them.
            try await withDeadline("forgetting departed servers") {
                try await self.client.execute(
                    """
                    DELETE FROM duplex_nodes n WHERE n.last_seen < now() - make_interval(secs => \(leaseMilliseconds) / 1000.0)
                    AND NOT EXISTS (SELECT 1 FROM duplex_members m WHERE m.node = n.node)
                    """,
                    logger: self.logger
                )
            }
        }
    }

    private func checkReplicas() async throws {
        let rooms = loadedReplicas
        guard !rooms.isEmpty else { return }
        let names = rooms.map(\.name)
        let latest = try await withDeadline("checking rooms") {
            var latest: [String: Int] = [:]
            for try await (room, seq) in try await self.client.query("SELECT room, latest_seq FROM duplex_rooms WHERE room = ANY(\(names))", logger: self.logger).decode((String, Int).self) {
                latest[room] = seq
            }
            return latest
        }
        for room in rooms where (latest[room.name] ?? 0) > room.latestSeq {
            requestCatchUp(room.name)
        }
    }

    // MARK: Helpers

    /// A frame's JSON split around its seq, so that `duplex_append` can number it:
    /// `prefix + String(seq) + suffix` is the frame with that seq.
    static func template(_ frame: (Int) -> ChatServerFrame) throws -> (prefix: String, suffix: String) {
        let placeholder = 9_007_199_254_740_991
        let json = try frame(placeholder).jsonString()
        let marker = #""seq":\#(placeholder)"#
        guard let range = json.range(of: marker), json.range(of: marker, range: range.upperBound..<json.endIndex) == nil else {
            throw ChatStoreUnavailable(description: "a frame could not be prepared for numbering")
        }
        return (String(json[..<range.lowerBound]) + #""seq":"#, String(json[range.upperBound...]))
    }

    /// Runs `operation`, failing with ``ChatStoreUnavailable`` if it takes longer than the query
    /// timeout; the operation is cancelled then, and not waited for.
    @discardableResult
    private func withDeadline<T: Sendable>(_ what: String, _ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        let limit = configuration.queryTimeout
        let pending = NIOLockedValueBox<CheckedContinuation<T, any Error>?>(nil)
        let take: @Sendable () -> CheckedContinuation<T, any Error>? = { pending.withLockedValue { continuation in
            defer { continuation = nil }
            return continuation
        } }
        let timer = NIOLockedValueBox<Task<Void, Never>?>(nil)
        return try await withCheckedThrowingContinuation { continuation in
            pending.withLockedValue { $0 = continuation }
            let work = Task {
                let result: Result<T, any Error>
                do {
                    result = .success(try await operation())
                } catch {
                    result = .failure(error)
                }
                take()?.resume(with: result)
                timer.withLockedValue { $0 }?.cancel()
            }
            let deadline = Task {
                guard (try? await Task.sleep(for: limit)) != nil, let continuation = take() else { return }
                work.cancel()
                continuation.resume(throwing: ChatStoreUnavailable(description: "\(what) took longer than \(limit)"))
            }
            timer.withLockedValue { $0 = deadline }
        }
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

    private static func jsonString(_ text: String) -> String {
        (try? String(decoding: JSONEncoder().encode(text), as: UTF8.self)) ?? "\"\""
    }
}
