import DuplexChat
import DuplexSchema
import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// Members: rows in `duplex_members`, joined and left in transactions.
extension PostgresChatStore {
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
    func join(room: String, member: RoomSubscriber.Member) async throws -> [String] {
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
                    let template = try Self.template { seq in
                        .left(ChatPresence(room: room, seq: seq, name: member.name, session: old.session, at: Date()))
                    }
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
                let template = try Self.template { seq in
                    .joined(ChatPresence(room: room, seq: seq, name: member.name, session: member.session, at: Date()))
                }
                let noKeys: [String] = []
                try await connection.execute(
                    "SELECT o_seq FROM duplex_append(\(room), 'joined', \(template.prefix), \(template.suffix), \(noKeys), \(noKeys), NULL, \(keep))",
                    logger: self.logger
                )
                var names: [String] = []
                for try await name in try await connection.query("SELECT name FROM duplex_members WHERE room = \(room)", logger: self.logger).decode(
                    String.self)
                {
                    names.append(name)
                }
                return names.sorted()
            }
        }
    }

    /// Records a member's departure, once: nothing happens when its row is gone already.
    func leave(room: String, name: String, session: String, cause: String) async throws {
        let template = try Self.template { seq in .left(ChatPresence(room: room, seq: seq, name: name, session: session, at: Date())) }
        let keep = self.keep
        try await withDeadline("recording a departure") {
            // Returns once the departure is committed, not once its statement ran (see `committed(on:)`).
            try await self.client.withConnection { connection in
                try await connection.execute(
                    "SELECT duplex_leave(\(room), \(session), \(template.prefix), \(template.suffix), \(cause), \(keep))",
                    logger: self.logger
                )
                try await Self.committed(on: connection, logger: self.logger)
            }
        }
    }
}
