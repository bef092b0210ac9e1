import NIOConcurrencyHelpers

/// What a seed example saw, and a way to wait for it (with a timeout around the wait) instead
/// of sleeping.
final class Log: Sendable {
    private struct State {
        var values: [String] = []
        var waiters: [UInt64: (predicate: @Sendable ([String]) -> Bool, continuation: CheckedContinuation<Void, Never>)] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let state = NIOLockedValueBox(State())

    /// Reads or changes the values; waiters whose condition now holds are woken.
    @discardableResult
    func withLockedValue<T>(_ body: (inout [String]) -> T) -> T {
        let (result, ready) = state.withLockedValue { state in
            let result = body(&state.values)
            let values = state.values
            let ready = state.waiters.filter { $0.value.predicate(values) }
            for id in ready.keys { state.waiters.removeValue(forKey: id) }
            return (result, ready.values.map(\.continuation))
        }
        for waiter in ready { waiter.resume() }
        return result
    }

    var values: [String] { state.withLockedValue { $0.values } }

    /// Returns once `predicate` holds for the values, or the task is cancelled.
    func wait(until predicate: @escaping @Sendable ([String]) -> Bool) async {
        let id = state.withLockedValue { state in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let done = state.withLockedValue { state in
                    if predicate(state.values) || Task.isCancelled { return true }
                    state.waiters[id] = (predicate, continuation)
                    return false
                }
                if done { continuation.resume() }
            }
        } onCancel: {
            state.withLockedValue { $0.waiters.removeValue(forKey: id) }?.continuation.resume()
        }
    }
}
