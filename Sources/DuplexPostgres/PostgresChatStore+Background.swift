import DuplexChat
import DuplexSchema
import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// The background work: listening for events, the lease, the sweep of expired members.
extension PostgresChatStore {
    /// Listens for events on a connection of its own; after every reconnection, catches up
    /// every replica, since notifications sent meanwhile are lost.
    func listen() async {
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
                    try await clock.measure(on: connection, logger: logger)
                    // Notifications are applied on the connection's event loop as they arrive:
                    // no task wakes up for each (postgres-nio's sequence would hop to one).
                    let listener = connection.addListener(channel: PostgresChatSchema.channel) { _, notification in
                        self.received(notification.payload)
                    }
                    defer { listener.stop() }
                    try await withTaskCancellationHandler {
                        // postgres-nio sends LISTEN for the listener first; this one is queued
                        // behind it, so once it is answered, every later event is notified.
                        try await connection.query("LISTEN \(unescaped: PostgresChatSchema.channel)", logger: logger)
                        self.listening()
                        delay = .milliseconds(100)
                        try await connection.closeFuture.get()
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

    func listening() {
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

    func lost(_ error: String) {
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
            metrics.lostConnection()
            logger.error(
                "lost the database connection; reconnecting (members cannot post until it is back)",
                metadata: ["store": "\(configuration.redactedURL)", "error": "\(error)"])
        }
    }

    /// Applies a notification to the replicas this server holds: `@MICROS`, the database's clock
    /// when it sent it, then one event per line, `ROOM\tSEQ\tCAUSE\tTYPE[\tJSON]`
    /// (``PostgresChatSchema``). When it applied any, records how long after it was sent.
    ///
    /// Lines and fields are split on their UTF-8 bytes (the separators are ASCII, which the
    /// JSON escapes): one pass, where splitting on `Character`s would run grapheme breaking.
    func received(_ payload: String) {
        var lines = payload.utf8.split(separator: UInt8(ascii: "\n")).map { Substring($0) }[...]
        var sent: Int64?
        if let first = lines.first, first.utf8.first == UInt8(ascii: "@") {
            sent = Int64(first.dropFirst())
            lines = lines.dropFirst()
        }
        var applied = false
        ChatRoom.applyingTogether {
            for line in lines where receivedEvent(line) { applied = true }
        }
        if applied, let sent {
            metrics.applied(lag: clock.lag(sinceDatabaseMicroseconds: sent))
        }
    }

    /// Applies one event of a notification; whether it was applied here.
    private func receivedEvent(_ payload: Substring) -> Bool {
        let fields = payload.utf8.split(separator: UInt8(ascii: "\t"), maxSplits: 4, omittingEmptySubsequences: false).map { Substring($0) }
        guard fields.count >= 4, let seq = Int(fields[1]) else {
            logger.warning("a notification that is not an event; ignored", metadata: ["payload": "\(payload.prefix(100))"])
            return false
        }
        let name = String(fields[0])
        guard let room = loadedReplica(name) else { return false }
        guard fields.count == 5, seq == room.latestSeq + 1 else {
            if seq > room.latestSeq { requestCatchUp(name) }
            return false
        }
        let event = Self.event(seq: seq, type: String(fields[3]), json: String(fields[4]), cause: String(fields[2]), epoch: room.epoch)
        if room.apply([event]) { return true }
        requestCatchUp(name)
        return false
    }

    /// Renews the lease; removes the members of servers whose lease ran out, and this server's
    /// member rows whose connection is gone; catches up replicas that fell behind.
    func heartbeat() async {
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

    func renewLease() async throws {
        let node = self.node
        try await withDeadline("renewing the lease") {
            try await self.client.execute(
                "INSERT INTO duplex_nodes (node) VALUES (\(node)) ON CONFLICT (node) DO UPDATE SET last_seen = now()",
                logger: self.logger
            )
        }
    }

    func sweep() async throws {
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
                logger.notice(
                    "removing a member of a server whose lease ran out",
                    metadata: ["room": "\(row.room)", "name": "\(row.name)", "server": "\(row.node)"])
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

    func checkReplicas() async throws {
        let rooms = loadedReplicas
        guard !rooms.isEmpty else { return }
        let names = rooms.map(\.name)
        let latest = try await withDeadline("checking rooms") {
            var latest: [String: Int] = [:]
            for try await (room, seq) in try await self.client.query(
                "SELECT room, latest_seq FROM duplex_rooms WHERE room = ANY(\(names))", logger: self.logger
            ).decode((String, Int).self) {
                latest[room] = seq
            }
            return latest
        }
        for room in rooms where (latest[room.name] ?? 0) > room.latestSeq {
            requestCatchUp(room.name)
        }
    }
}
