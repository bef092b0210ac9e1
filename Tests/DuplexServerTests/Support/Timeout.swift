/// The test took longer than its limit.
struct TimeoutError: Error, CustomStringConvertible {
    var limit: Duration
    var description: String { "timed out after \(limit)" }
}

/// Runs `body`, cancelling it and throwing ``TimeoutError`` if it takes longer than `limit`.
/// Every read in these tests happens inside one of these, so a broken server fails fast.
func withTimeout<T: Sendable>(
    _ limit: Duration = .seconds(15),
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            throw TimeoutError(limit: limit)
        }
        defer { group.cancelAll() }
        return try await group.next()!
    }
}
