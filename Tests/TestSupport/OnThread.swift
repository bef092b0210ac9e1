import Foundation

/// Runs `body` on a thread of its own and awaits its result without holding a thread of Swift's
/// cooperative pool.
///
/// The pool has one thread per core (two in CI) and every test's tasks share it: a test that
/// blocks there (waiting for a process or a semaphore) or computes there for seconds stalls every
/// other test, whose time limits then fail for no fault of their own.
package func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}
