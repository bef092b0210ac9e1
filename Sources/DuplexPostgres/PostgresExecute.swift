import PostgresNIO

extension PostgresConnection {
    /// Runs a statement and reads its result to the end, so that a failure in it (raised while
    /// rows are produced, as from a function) throws here instead of aborting the transaction
    /// silently.
    func execute(_ query: PostgresQuery, logger: Logger) async throws {
        for try await _ in try await self.query(query, logger: logger) {}
    }
}

extension PostgresClient {
    /// Runs a statement and reads its result to the end (see ``PostgresNIO/PostgresConnection/execute(_:logger:)``).
    func execute(_ query: PostgresQuery, logger: Logger) async throws {
        for try await _ in try await self.query(query, logger: logger) {}
    }
}
