import DuplexWire
import NIOConcurrencyHelpers

/// Whether a producer may go on: closed while any lossless consumer of the broadcasters that
/// share it is behind, open again once every one has caught up.
///
/// A socket's transport asks ``isOpen`` before each read from the network; an async producer
/// (the SSE body pump, the chat pump) awaits ``waitUntilOpen()`` between elements.
package final class DemandGate: Sendable {
    private struct State: DeferringWork {
        var behind = 0
        var waiters = Waiters<Void>()
        var onOpen: (@Sendable () -> Void)?
        var closeWatchers = Waiters<Void>()
        var afterUnlock: [@Sendable () -> Void] = []
    }

    private let state = NIOLockedValueBox(State())

    package init() {}

    /// True when no consumer is behind.
    package var isOpen: Bool { state.withLockedValue { $0.behind == 0 } }

    /// Called (outside every lock) each time the gate opens again.
    package func onOpen(_ body: @escaping @Sendable () -> Void) {
        state.withLockedValue { $0.onOpen = body }
    }

    func consumerFellBehind() {
        state.locked { state in
            state.behind += 1
            state.resume(state.closeWatchers.takeAll(), with: .success(()))
        }
    }

    /// Returns once the gate has closed (now or later): for tests, wrapped in a timeout.
    package func waitUntilClosed() async {
        try? await state.wait(in: \.closeWatchers) { $0.behind > 0 ? .success(()) : nil }
    }

    /// Returns the hook to call once the caller has released its locks, when the gate opened: it
    /// wakes the producers waiting for the gate and calls ``onOpen(_:)``'s body. No waiter is
    /// resumed under a lock: a waiter whose task is being cancelled at that moment holds its
    /// task's lock while its cancellation handler waits for this gate's, and resuming it needs
    /// the task's lock (a deadlock).
    func consumerCaughtUp() -> (@Sendable () -> Void)? {
        state.withLockedValue { state in
            state.behind -= 1
            guard state.behind == 0 else { return nil }
            let waiters = state.waiters.takeAll()
            let onOpen = state.onOpen
            return {
                waiters.resume()
                onOpen?()
            }
        }
    }

    /// Returns when the gate is open, or when the calling task is cancelled.
    package func waitUntilOpen() async {
        if isOpen { return }
        try? await state.wait(in: \.waiters) { $0.behind == 0 ? .success(()) : nil }
    }
}
