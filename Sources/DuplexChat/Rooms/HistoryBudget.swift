import DuplexHost
import NIOConcurrencyHelpers

/// The bytes of history every room together may keep, shared by the rooms of one server.
package final class HistoryBudget: Sendable {
    package let limit: Int
    private let used = NIOLockedValueBox(0)

    package init(limit: Int) {
        self.limit = max(limit, 0)
    }

    /// Bytes in use.
    package var bytes: Int { used.withLockedValue { $0 } }

    /// Adds `bytes`; returns whether the total is now over the limit.
    package func add(_ bytes: Int) -> Bool {
        used.withLockedValue { used in
            used += bytes
            return used > limit
        }
    }

    /// Releases `bytes`; returns whether the total is still over the limit.
    package func release(_ bytes: Int) -> Bool {
        used.withLockedValue { used in
            used -= bytes
            return used > limit
        }
    }
}
