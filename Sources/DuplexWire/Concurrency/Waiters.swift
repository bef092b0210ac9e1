package import NIOConcurrencyHelpers

/// Tasks waiting for an outcome, each under a key of its own so that one can leave alone (when
/// it is cancelled), all resumed together when the outcome comes. The one waiter set of both
/// ends: the clients' `connect()` and `disconnect()`, sends waiting for a buffer to drain, a chat
/// join and delivery, the demand gate; the server's wait for its connections to end and for its
/// HTTP/2 counts. Kept inside the owner's locked state; resume what ``takeAll()`` returns after
/// the lock is released.
package struct Waiters<Value: Sendable>: Sendable {
    private var lastKey: UInt64 = 0
    private var waiting: [UInt64: CheckedContinuation<Value, any Error>] = [:]

    package init() {}

    package var isEmpty: Bool { waiting.isEmpty }
    package var count: Int { waiting.count }

    /// A fresh key for a waiter about to be added.
    package mutating func reserveKey() -> UInt64 {
        lastKey &+= 1
        return lastKey
    }

    package mutating func add(_ continuation: CheckedContinuation<Value, any Error>, key: UInt64) {
        waiting[key] = continuation
    }

    /// Takes out the waiter of `key`, if it still waits.
    package mutating func remove(_ key: UInt64) -> CheckedContinuation<Value, any Error>? {
        waiting.removeValue(forKey: key)
    }

    /// Takes out every waiter.
    package mutating func takeAll() -> Resumption<Value> {
        defer { waiting = [:] }
        return Resumption(continuations: Array(waiting.values))
    }
}

/// Waiters taken out of a ``Waiters`` set, to be resumed once the lock is released.
package struct Resumption<Value: Sendable>: Sendable {
    fileprivate(set) var continuations: [CheckedContinuation<Value, any Error>] = []

    package static var none: Resumption { Resumption() }

    package func resume(with result: Result<Value, any Error>) {
        for continuation in continuations { continuation.resume(with: result) }
    }

    package func resume(returning value: Value) {
        resume(with: .success(value))
    }

    package func resume(throwing error: any Error) {
        resume(with: .failure(error))
    }
}

extension Resumption where Value == Void {
    package func resume() {
        resume(returning: ())
    }
}

/// A locked state that keeps work to run once its lock is released: resuming waiters. No waiter
/// is resumed under a lock (a waiter whose task is being cancelled holds its task's lock while
/// its cancellation handler waits for ours, and resuming it needs the task's lock).
package protocol DeferringWork {
    /// Run, in order, right after the lock is released (``NIOLockedValueBox/locked(_:)``).
    var afterUnlock: [@Sendable () -> Void] { get set }
}

extension DeferringWork {
    /// Resumes `waiters` once the lock is released.
    package mutating func resume<Outcome>(_ waiters: Resumption<Outcome>, with result: Result<Outcome, any Error>) {
        guard !waiters.continuations.isEmpty else { return }
        afterUnlock.append { waiters.resume(with: result) }
    }
}

extension NIOLockedValueBox where Value: DeferringWork & Sendable {
    /// Runs `body` under the lock, then the work it deferred, outside it.
    package func locked<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        let (result, after) = try withLockedValue { value -> (Result, [@Sendable () -> Void]?) in
            let result = try body(&value)
            // The usual case, nothing deferred: no array is copied or written.
            guard !value.afterUnlock.isEmpty else { return (result, nil) }
            defer { value.afterUnlock = [] }
            return (result, value.afterUnlock)
        }
        if let after {
            for work in after { work() }
        }
        return result
    }

    /// Waits in the set at `waiters` of the locked value, unless `now` (run under the lock
    /// first) gives the outcome at once. A cancelled task leaves the set and throws
    /// `CancellationError`.
    package func wait<Outcome: Sendable>(
        in waiters: any WritableKeyPath<Value, Waiters<Outcome>> & Sendable,
        now: (inout Value) -> Result<Outcome, any Error>? = { _ in nil }
    ) async throws -> Outcome {
        let key = withLockedValue { $0[keyPath: waiters].reserveKey() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Outcome, any Error>) in
                let immediate: Result<Outcome, any Error>? = locked { state in
                    // Checked under the lock: a cancellation either came before (seen here) or
                    // finds the waiter below.
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if let outcome = now(&state) { return outcome }
                    state[keyPath: waiters].add(continuation, key: key)
                    return nil
                }
                if let immediate { continuation.resume(with: immediate) }
            }
        } onCancel: {
            withLockedValue { $0[keyPath: waiters].remove(key) }?.resume(throwing: CancellationError())
        }
    }
}
