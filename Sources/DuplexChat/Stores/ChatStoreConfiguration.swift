package import Logging

/// Where a `DuplexServer` keeps its chat rooms: ``memory``, the default, or another store, as
/// the `DuplexPostgres` library's `.postgres(_:)`, which keeps them in PostgreSQL so that every
/// server on the same database serves the same rooms. A store that needs a database lives in a
/// library of its own, so that a server without one links none.
public struct ChatStoreConfiguration: Sendable, Equatable, CustomStringConvertible {
    /// What a store is made from: the server's limits, logger and metrics.
    package struct Context: Sendable {
        package var historyLimit: Int
        package var historyBytesLimit: Int
        package var totalHistoryBytesLimit: Int
        package var maxRooms: Int
        package var logger: Logger
        package var metrics: ChatMetrics.Store

        package init(
            historyLimit: Int,
            historyBytesLimit: Int,
            totalHistoryBytesLimit: Int,
            maxRooms: Int,
            logger: Logger,
            metrics: ChatMetrics.Store
        ) {
            self.historyLimit = historyLimit
            self.historyBytesLimit = historyBytesLimit
            self.totalHistoryBytesLimit = totalHistoryBytesLimit
            self.maxRooms = maxRooms
            self.logger = logger
            self.metrics = metrics
        }
    }

    /// The store's kind, as `GET /health` names it: `memory`, `postgres`.
    public let kind: String
    /// The store's own settings, compared by ``==(_:_:)``; nil for the memory store.
    package let settings: (any Hashable & Sendable)?
    /// Makes the store; nil for the memory store, which the server makes itself.
    package let make: (@Sendable (Context) -> any ChatStore)?

    /// A store of `kind` with `settings`, made by `make`.
    package init(kind: String, settings: (any Hashable & Sendable)?, make: (@Sendable (Context) -> any ChatStore)?) {
        self.kind = kind
        self.settings = settings
        self.make = make
    }

    /// In the process's memory: one process serves each room, and a restart loses the rooms
    /// (clients learn it from a new epoch).
    public static let memory = ChatStoreConfiguration(kind: "memory", settings: nil, make: nil)

    public static func == (lhs: ChatStoreConfiguration, rhs: ChatStoreConfiguration) -> Bool {
        lhs.kind == rhs.kind && lhs.settings.map { AnyHashable($0) } == rhs.settings.map { AnyHashable($0) }
    }

    /// `memory`, or the store's kind and what its settings say of themselves when they say it
    /// (the PostgreSQL store's URL without its password); never a settings value dumped whole.
    public var description: String {
        guard let settings = settings as? any CustomStringConvertible else { return kind }
        return "\(kind) \(settings.description)"
    }
}
