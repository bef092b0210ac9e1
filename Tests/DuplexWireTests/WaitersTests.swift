import DuplexWire
import NIOConcurrencyHelpers
import Testing

/// The one waiter set of both ends (DuplexWire): immediate outcomes, resumption after the lock,
/// cancellation.
@Suite("Waiters")
struct WaitersTests {
    struct TimedOut: Error {}

    struct State: DeferringWork, Sendable {
        var ready = false
        var waiters = Waiters<Int>()
        var afterUnlock: [@Sendable () -> Void] = []
    }

    @Test("an outcome known under the lock returns at once, and nothing is left waiting")
    func immediate() async throws {
        let box = NIOLockedValueBox(State(ready: true))
        let value = try await box.wait(in: \.waiters) { $0.ready ? .success(7) : nil }
        #expect(value == 7)
        #expect(box.withLockedValue { $0.waiters.isEmpty })
    }

    @Test("every waiter is resumed with the outcome, after the lock is released")
    func resumedTogether() async throws {
        let box = NIOLockedValueBox(State())
        try await withDeadline(.seconds(5), orThrow: { TimedOut() }) {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<3 { group.addTask { try await box.wait(in: \.waiters) } }
                while box.withLockedValue({ $0.waiters.count }) < 3 { await Task.yield() }
                box.locked { state in
                    state.resume(state.waiters.takeAll(), with: .success(42))
                    #expect(state.afterUnlock.count == 1, "deferred, not resumed under the lock")
                }
                var values: [Int] = []
                for try await value in group { values.append(value) }
                #expect(values == [42, 42, 42])
            }
        }
    }

    @Test("a cancelled waiter leaves the set and throws CancellationError; the others go on waiting")
    func cancellation() async throws {
        let box = NIOLockedValueBox(State())
        try await withDeadline(.seconds(5), orThrow: { TimedOut() }) {
            let cancelled = Task { try await box.wait(in: \.waiters) }
            let kept = Task { try await box.wait(in: \.waiters) }
            while box.withLockedValue({ $0.waiters.count }) < 2 { await Task.yield() }
            cancelled.cancel()
            await #expect(throws: CancellationError.self) { try await cancelled.value }
            #expect(box.withLockedValue { $0.waiters.count } == 1)
            box.locked { state in state.resume(state.waiters.takeAll(), with: .success(1)) }
            let value = try await kept.value
            #expect(value == 1)
        }
    }
}
