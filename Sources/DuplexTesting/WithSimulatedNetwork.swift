public import DuplexFaultProxy
import Foundation

/// Runs `body` on a ``SimulatedNetwork`` whose ``TestClock`` moves by itself: whenever every task
/// of the test waits, the time jumps to the next timer or delivery. An hour of reconnections
/// takes milliseconds, and the same seed gives the same ``SimulatedNetwork/eventLog``.
///
/// ```swift
/// try await withSimulatedNetwork(seed: 42) { network, clock in
///     let server = network.server(host: "chat.test")
///     var configuration = WebSocketConfiguration()
///     configuration.reconnection = .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(60))
///     let socket = network.webSocket(url: "ws://chat.test/", configuration: configuration)
///     try await socket.connect()
///     server.restart(downFor: .seconds(120))
///     try await clock.sleep(for: .seconds(180))    // no real time passes
///     #expect(socket.state == .connected(protocol: nil))
/// }
/// ```
///
/// The seed is `seed`, else a random one; the environment variable `DUPLEX_SIMULATION_SEED`
/// overrides both, to rerun a failure with its seed. When `body` throws, the seed and the log's
/// last lines are printed, and the error is thrown on. When it returns, the clients made with
/// ``SimulatedNetwork/webSocket(url:configuration:)`` are terminated and every sleep left on the
/// clock ends with `CancellationError`.
///
/// `body` must wait only on the network and the clock (a real socket or `Task.sleep` never
/// finishes its wait here: bound the test with a time limit).
/// - Parameters:
///   - seed: the network's seed; nil for a random one (printed when `body` throws).
///   - link: the link between clients and servers; by default ``DuplexFaultProxy/FaultProxy/LinkProfile/instant``
///     (deliveries arrive at once, in order).
///   - body: the test, given the network and its clock.
/// - Returns: what `body` returns.
public func withSimulatedNetwork<Result: Sendable>(
    seed: UInt64? = nil,
    link: FaultProxy.LinkProfile = .init(
        name: "instant", downlink: .init(kilobitsPerSecond: nil, delay: .zero), uplink: .init(kilobitsPerSecond: nil, delay: .zero)),
    _ body: @escaping @Sendable (SimulatedNetwork, TestClock) async throws -> Result
) async throws -> Result {
    let chosen = ProcessInfo.processInfo.environment["DUPLEX_SIMULATION_SEED"].flatMap(UInt64.init) ?? seed ?? UInt64.random(in: .min ... .max)
    let network = SimulatedNetwork(seed: chosen, link: link)
    do {
        let result = try await network.clock.drive {
            let result = try await body(network, network.clock)
            await network.shutDown()
            return result
        }
        network.clock.cancelAll()
        return result
    } catch {
        network.clock.cancelAll()
        let tail = network.eventLines.suffix(20).joined(separator: "\n")
        print("withSimulatedNetwork failed with seed \(chosen) (rerun: DUPLEX_SIMULATION_SEED=\(chosen)): \(error)\nlast events:\n\(tail)")
        throw error
    }
}

extension FaultProxy.LinkProfile {
    /// `instant`: no delay, no limit, no loss either way: on a ``SimulatedNetwork``, what is sent
    /// arrives at the same virtual instant, in order.
    public static let instant = FaultProxy.LinkProfile(
        name: "instant", downlink: Link(kilobitsPerSecond: nil, delay: .zero), uplink: Link(kilobitsPerSecond: nil, delay: .zero))
}
