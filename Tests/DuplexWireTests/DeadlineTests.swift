import NIOConcurrencyHelpers
import Testing

@testable import DuplexWire

/// The one timeout race of the package, on a clock the test fires by hand.
@Suite("withDeadline")
struct DeadlineTests {
    struct Late: Error {}

    @Test("the body's value when it ends first; the body is not waited on past it")
    func bodyFirst() async throws {
        let clock = FiredClock()
        for mode in [DeadlineMode.cancelAndWait, .cancelAndAbandon] {
            let value = try await withDeadline(.seconds(1), clock: clock, onDeadline: mode, orThrow: { Late() }) { 42 }
            #expect(value == 42)
        }
    }

    @Test("cancelAndWait: at the deadline the body is cancelled and waited for, then the error is thrown")
    func cancelAndWait() async throws {
        let clock = FiredClock()
        let sawCancellation = NIOLockedValueBox(false)
        await #expect(throws: Late.self) {
            try await withDeadline(.seconds(1), clock: clock, orThrow: { Late() }) {
                clock.fire()
                // Ends on cancellation only (a clock nobody fires), as the waits this mode serves do.
                try? await FiredClock().sleep(for: .seconds(3600))
                sawCancellation.withLockedValue { $0 = true }
            }
        }
        #expect(sawCancellation.withLockedValue { $0 }, "the body ended before the call returned")
    }

    @Test("cancelAndAbandon: at the deadline the error is thrown while a body that ignores cancellation still runs")
    func cancelAndAbandon() async throws {
        let clock = FiredClock()
        let held = NIOLockedValueBox<CheckedContinuation<Void, Never>?>(nil)
        let (done, doneSignal) = AsyncStream.makeStream(of: Void.self)
        await #expect(throws: Late.self) {
            try await withDeadline(.seconds(1), clock: clock, onDeadline: .cancelAndAbandon, orThrow: { Late() }) {
                // Ignores cancellation: waits until the test lets it go.
                await withCheckedContinuation { continuation in
                    held.withLockedValue { $0 = continuation }
                    clock.fire()
                }
                doneSignal.finish()
            }
        }
        #expect(held.withLockedValue { $0 } != nil, "the call returned while the body still ran")
        held.withLockedValue { $0 }?.resume()
        for await _ in done {}
    }
}

/// A clock whose sleeps end when the test fires it (at once, once it has fired), or when the
/// sleeping task is cancelled.
final class FiredClock: Clock, Sendable {
    typealias Instant = ContinuousClock.Instant
    private struct State {
        var fired = false
        var next = 0
        var sleepers: [Int: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = NIOLockedValueBox(State())

    var now: Instant { .now }
    var minimumResolution: Duration { .zero }

    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        let id = state.withLockedValue { state in
            state.next += 1
            return state.next
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLockedValue { state in
                    if state.fired || Task.isCancelled { return true }
                    state.sleepers[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLockedValue { $0.sleepers.removeValue(forKey: id) }?.resume()
        }
        try Task.checkCancellation()
    }

    func fire() {
        let sleepers = state.withLockedValue { state in
            state.fired = true
            defer { state.sleepers = [:] }
            return Array(state.sleepers.values)
        }
        for sleeper in sleepers { sleeper.resume() }
    }
}
