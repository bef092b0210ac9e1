public import DuplexChat

extension ChatStoreConfiguration {
    /// In PostgreSQL: every server on the same database serves the same rooms, with one seq per
    /// room, the history and the `say` idempotency records kept in tables, and new events fanned
    /// out with LISTEN/NOTIFY (``PostgresChatStore``).
    public static func postgres(_ configuration: PostgresStoreConfiguration) -> ChatStoreConfiguration {
        ChatStoreConfiguration(kind: "postgres", settings: configuration) { context in
            PostgresChatStore(
                configuration: configuration,
                historyLimit: context.historyLimit,
                historyBytesLimit: context.historyBytesLimit,
                totalHistoryBytesLimit: context.totalHistoryBytesLimit,
                maxRooms: context.maxRooms,
                logger: context.logger,
                metrics: context.metrics
            )
        }
    }

    /// The PostgreSQL settings of a ``postgres(_:)`` store; nil for any other.
    public var postgres: PostgresStoreConfiguration? {
        settings as? PostgresStoreConfiguration
    }

    /// Reads `memory`, or a `postgres://` (or `postgresql://`) URL.
    /// - Throws: ``PostgresStoreConfiguration/URLError`` for a URL it cannot use.
    public init(parsing text: String) throws {
        if text == "memory" {
            self = .memory
        } else {
            self = .postgres(try PostgresStoreConfiguration(url: text))
        }
    }
}
