import DuplexSchema
import DuplexWire
import Logging
import NIOConcurrencyHelpers

/// What a client's core keeps of its lifecycle, under its lock.
protocol LifecycleState: DeferringWork, Sendable {
    associatedtype Policy: LifecyclePolicy
    var lifecycle: ConnectionLifecycle<Policy> { get set }
    var connectWaiters: Waiters<Void> { get set }
    var disconnectWaiters: Waiters<Void> { get set }
    var retryTimer: Task<Void, Never>? { get set }
}

/// The one runner of ``ConnectionLifecycle``, for every client's core (``WebSocketCore`` for
/// ``WebSocket``, ``ReconnectingWebSocket`` and ``ChatClient``; ``ServerSentEventCore``): the
/// requests ask the lifecycle under the core's lock and carry out what it answers. The actions
/// every client carries out alike (the retry timer on the injected clock, resuming the waiters)
/// are done here; the core does the rest (its connection, streams and public state).
protocol LifecycleRunner: AnyObject, Sendable {
    associatedtype State: LifecycleState
    typealias Lifecycle = ConnectionLifecycle<State.Policy>

    /// The core's locked state.
    var lifecycleBox: NIOLockedValueBox<State> { get }
    /// The clock its timers run on.
    var clock: any Clock<Duration> { get }
    var logger: Logger { get }
    /// Where the lifecycle's attempts, failures, losses and reconnections are counted.
    var metrics: ClientMetrics { get }

    /// Carries out an action that is the core's own, under the lock.
    func performOwn(_ action: Lifecycle.Action, in state: inout State)
    /// What `connect()` throws for `failure`; `atOnce`: refused when asked, not after waiting.
    func connectError(_ failure: Lifecycle.Failure, atOnce: Bool) -> any Error
}

extension LifecycleRunner {
    /// Carries out what the lifecycle answered, under the lock. What reaches code not ours (the
    /// metrics factory's handlers, the log handler, waiters) runs once the lock is released, in
    /// order (``DeferringWork/afterUnlock``).
    func perform(_ actions: [Lifecycle.Action], in state: inout State) {
        let (metrics, logger) = (self.metrics, self.logger)
        for action in actions {
            state.afterUnlock.append { metrics.observe(action, cause: State.Policy.metricsCause(of:)) }
            switch action {
            case .scheduleRetry(let attempt, let delay):
                state.afterUnlock.append { logger.info("reconnecting", metadata: ["attempt": "\(attempt + 1)", "delay": "\(delay)"]) }
                state.retryTimer = startRetryTimer(after: delay, on: clock) { [weak self] in self?.retryTimerFired(attempt: attempt) }
            case .cancelRetryTimer:
                state.retryTimer?.cancel()
                state.retryTimer = nil
            case .resumeConnectWaiters(let failure):
                state.resume(state.connectWaiters.takeAll(), with: failure.map { .failure(connectError($0, atOnce: false)) } ?? .success(()))
            case .resumeDisconnectWaiters:
                state.resume(state.disconnectWaiters.takeAll(), with: .success(()))
            default:
                performOwn(action, in: &state)
            }
        }
    }

    /// Returns once connected, at once when already; throws what the lifecycle says.
    func requestConnect() async throws {
        try await lifecycleBox.wait(in: \.connectWaiters) { state in
            switch state.lifecycle.connect() {
            case .alreadyConnected:
                return .success(())
            case .fail(let failure):
                return .failure(connectError(failure, atOnce: true))
            case .wait(let actions):
                perform(actions, in: &state)
                return nil
            }
        }
    }

    /// Starts an attempt, as ``requestConnect()`` does, without waiting for it.
    func startConnecting() {
        lifecycleBox.locked { state in
            if case .wait(let actions) = state.lifecycle.connect() { perform(actions, in: &state) }
        }
    }

    /// Returns once disconnected: after the close handshake, at once when not connected.
    func requestDisconnect(code: WebSocketCloseCode, reason: String) async {
        try? await lifecycleBox.wait(in: \.disconnectWaiters) { state in
            switch state.lifecycle.disconnect(code: code, reason: reason) {
            case .done:
                return .success(())
            case .immediate(let actions):
                perform(actions, in: &state)
                return .success(())
            case .wait(let actions):
                perform(actions, in: &state)
                return nil
            }
        }
    }

    /// Starts a disconnect without waiting for it.
    func startDisconnect(code: WebSocketCloseCode, reason: String) {
        lifecycleBox.locked { state in
            switch state.lifecycle.disconnect(code: code, reason: reason) {
            case .done: break
            case .immediate(let actions), .wait(let actions): perform(actions, in: &state)
            }
        }
    }

    /// Ends for good.
    func requestTerminate() {
        lifecycleBox.locked { state in
            perform(state.lifecycle.terminate(), in: &state)
        }
    }

    /// The lifecycle stopped for good or for now: disconnected, given up, or terminated.
    var hasEnded: Bool {
        lifecycleBox.withLockedValue { state in
            switch state.lifecycle.phase {
            case .ended, .terminated: true
            default: false
            }
        }
    }

    private func retryTimerFired(attempt: Int) {
        lifecycleBox.locked { state in
            state.retryTimer = nil
            perform(state.lifecycle.retryTimerFired(attempt: attempt), in: &state)
        }
    }
}
