public import DuplexFaultProxy
public import Logging

/// Runs `body` with a `FaultProxy` in front of `upstreamPort` while `scenario` plays its
/// timeline of faults on it, from the moment `body` starts; then stops the proxy.
///
/// ```swift
/// let scenario = try FaultScenario(contentsOf: "Tests/Scenarios/flaky-network.json")
/// try await withDuplexServer(configuration: .init(chaos: true)) { server in
///     try await withScenario(scenario, upstreamPort: server.port) { proxy in
///         let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(proxy.port)/echo")!)
///         // drive the client through the faults; proxy.seed replays the same choices
///     }
/// }
/// ```
///
/// The proxy's seed is `seed`, else the scenario's, else a random one (logged, with each step as
/// it takes effect). When `body` returns first, the rest of the scenario is not played. A step
/// that fails (a chaos step the server refuses: is it running with `chaos`?) cancels `body` and
/// is thrown.
/// - Parameters:
///   - scenario: the faults and their times.
///   - upstreamHost: where the proxy forwards, and chaos steps go.
///   - upstreamPort: the server's port.
///   - seed: the proxy's seed; nil for the scenario's.
///   - clock: the clock the steps wait on.
///   - logger: where each step is logged, at `notice`.
///   - body: the test, given the proxy (its `FaultProxy.port` is where clients connect).
/// - Returns: what `body` returns.
public func withScenario<Result: Sendable>(
    _ scenario: FaultScenario,
    upstreamHost: String = "127.0.0.1",
    upstreamPort: Int,
    seed: UInt64? = nil,
    clock: some Clock<Duration> = ContinuousClock(),
    logger: Logger = Logger(label: "duplex.scenario"),
    _ body: @escaping @Sendable (FaultProxy) async throws -> Result
) async throws -> Result {
    let proxy = try await FaultProxy.start(upstreamHost: upstreamHost, upstreamPort: upstreamPort, seed: seed ?? scenario.seed)
    do {
        // The body's result, or nil when the scenario ended (the body goes on).
        let result = try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask { try await body(proxy) }
            group.addTask {
                try await scenario.run(on: proxy, clock: clock) { logger.notice("\($0)") }
                return nil
            }
            while let outcome = try await group.next() {
                if let result = outcome {
                    group.cancelAll()
                    return result
                }
            }
            throw CancellationError()
        }
        await proxy.stop()
        return result
    } catch {
        await proxy.stop()
        throw error
    }
}
