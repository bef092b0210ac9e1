/// Runs `body`, and throws `error()` instead when it has not finished within `timeout` on
/// `clock`. `body` is cancelled then, so it must end on cancellation.
package func withDeadline<T: Sendable>(
    _ timeout: Duration,
    clock: any Clock<Duration> = ContinuousClock(),
    orThrow error: @escaping @Sendable () -> any Error,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await clock.sleep(for: timeout)
            throw error()
        }
        defer { group.cancelAll() }
        guard let first = try await group.next() else { throw CancellationError() }
        return first
    }
}
