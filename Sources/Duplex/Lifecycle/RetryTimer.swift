import DuplexWire

/// The lifecycle's retry timer, as every client runs it: after `delay` on `clock`, `fire` runs,
/// unless the returned task is cancelled first (``ConnectionLifecycle/Action/cancelRetryTimer``,
/// terminate). Its owner keeps the task and cancels it; `fire` holds the owner weakly.
func startRetryTimer(after delay: Duration, on clock: any Clock<Duration>, fire: @escaping @Sendable () -> Void) -> Task<Void, Never> {
    let sleep = sleeper(on: clock, for: delay)
    return Task(on: clock) {
        guard (try? await sleep()) != nil else { return }
        fire()
    }
}
