import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// The database's clock as this server sees it, for the apply lag of notifications (which carry
/// the database's time when it sent them).
///
/// The offset between the two clocks is measured as NTP does, the database's time against the
/// midpoint of the round trip that asked for it, each time the listening connection comes up;
/// so the lag holds when the database runs on a machine whose clock differs from this one's, to
/// within half a round trip.
final class DatabaseClock: Sendable {
    /// The database's clock less this machine's, in microseconds.
    private let offset = NIOLockedValueBox<Int64>(0)

    /// This machine's clock, in microseconds since 1970.
    static func localMicroseconds() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1_000_000).rounded())
    }

    /// Measures the offset on `connection`.
    func measure(on connection: PostgresConnection, logger: Logger) async throws {
        let before = Self.localMicroseconds()
        let rows = try await connection.query("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint", logger: logger)
        var database: Int64?
        for try await value in rows.decode(Int64.self) { database = value }
        let after = Self.localMicroseconds()
        guard let database else { return }
        offset.withLockedValue { $0 = database - (before + after) / 2 }
    }

    /// How long ago the database's clock read `sent`: from 0 to a day, whatever a notification
    /// says (anyone who may `NOTIFY` on the channel can write one).
    func lag(sinceDatabaseMicroseconds sent: Int64) -> Duration {
        let (now, late) = Self.localMicroseconds().addingReportingOverflow(offset.withLockedValue { $0 })
        let (lag, wrapped) = now.subtractingReportingOverflow(sent)
        guard !late, !wrapped else { return .zero }
        return .microseconds(min(max(lag, 0), 86_400_000_000))
    }
}
