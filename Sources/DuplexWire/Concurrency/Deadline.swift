/// What ``withDeadline(_:clock:onDeadline:orThrow:_:)`` does with work still running at the
/// deadline.
package enum DeadlineMode: Sendable {
    /// Cancel it and wait for it to end: for work that ends on cancellation (every wait in the
    /// clients). Nothing outlives the call.
    case cancelAndWait
    /// Cancel it and return at once, without waiting: for work that may not end when cancelled
    /// (a query to a database server that stopped answering). It ends in the background.
    case cancelAndAbandon
}

/// Runs `body`, and throws `error()` instead when it has not finished within `timeout` on
/// `clock`: the one timeout race of the package, client and server alike.
package func withDeadline<T: Sendable>(
    _ timeout: Duration,
    clock: any Clock<Duration> = ContinuousClock(),
    onDeadline mode: DeadlineMode = .cancelAndWait,
    orThrow error: @escaping @Sendable () -> any Error,
    _ body: @escaping @Sendable () async throws -> T
) async throws -> T {
    let sleep = sleeper(on: clock, for: timeout)
    switch mode {
    case .cancelAndWait:
        return try await withThrowingTaskGroup(of: T.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await sleep()
                throw error()
            }
            defer { group.cancelAll() }
            guard let first = try await group.next() else { throw CancellationError() }
            return first
        }
    case .cancelAndAbandon:
        // Unstructured on purpose: the caller must not wait for work that may not end when
        // cancelled. Whichever ends the stream first, the work or the timer, decides; the work
        // ends in the background when `body` returns, the timer when cancelled below.
        let (outcome, continuation) = AsyncThrowingStream.makeStream(of: T.self)
        let work = Task {
            do {
                continuation.yield(try await body())
                continuation.finish()
            } catch {
                continuation.finish(throwing: error)
            }
        }
        let timer = Task {
            guard (try? await sleep()) != nil else { return }
            continuation.finish(throwing: error())
            work.cancel()
        }
        defer { timer.cancel() }
        return try await withTaskCancellationHandler {
            for try await value in outcome { return value }
            throw CancellationError()
        } onCancel: {
            work.cancel()
        }
    }
}

/// A wait on `clock` until `delay` after now, the deadline taken when this is called, not when
/// the wait begins: a task that starts its timer late (on a loaded machine, or on a simulated
/// network whose time moves while the task is being scheduled) still ends it on time.
package func sleeper(on clock: any Clock<Duration>, for delay: Duration) -> @Sendable () async throws -> Void {
    func opened<C: Clock<Duration>>(_ clock: C) -> @Sendable () async throws -> Void {
        let deadline = clock.now.advanced(by: delay)
        return { try await clock.sleep(until: deadline, tolerance: nil) }
    }
    return opened(clock)
}
