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
/// overrides both, to rerun a failure with its seed (``InvalidSimulationSeed`` is thrown when it
/// holds anything but a number). When `body` throws, the seed and the log's
/// last lines are printed, and the error is thrown on. When it returns, the clients made with
/// ``SimulatedNetwork/webSocket(url:protocols:configuration:)`` are terminated and every sleep left on the
/// clock ends with `CancellationError`.
///
/// `body` must wait only on the network and the clock. When it waits for something that cannot
/// come (nothing is left to run and nothing is scheduled: a message no one sends, a real socket,
/// a `Task.sleep`), ``SimulationStalled`` is thrown after `stallTimeout` of real time, with the
/// seed and the last events, and `body` is cancelled.
/// - Parameters:
///   - seed: the network's seed; nil for a random one (printed when `body` throws).
///   - link: the link between clients and servers; by default `FaultProxy.LinkProfile.instant`
///     (deliveries arrive at once, in order).
///   - stallTimeout: how long, in real time, nothing may be left to run or scheduled before the
///     simulation counts as stalled.
///   - body: the test, given the network and its clock.
/// - Returns: what `body` returns.
public func withSimulatedNetwork<Result: Sendable>(
    seed: UInt64? = nil,
    link: FaultProxy.LinkProfile = .instant,
    stallTimeout: Duration = .seconds(1),
    _ body: @escaping @Sendable (SimulatedNetwork, TestClock) async throws -> Result
) async throws -> Result {
    let chosen = try simulationSeed(given: seed, environment: ProcessInfo.processInfo.environment)
    let network = SimulatedNetwork(seed: chosen, link: link)
    do {
        let result = try await network.clock.drive(
            stallTimeout: stallTimeout,
            stalled: { SimulationStalled(seed: chosen, at: network.clock.now, lastEvents: network.eventLines.suffix(20)) }
        ) {
            let result = try await body(network, network.clock)
            await network.shutDown()
            return result
        }
        network.release()
        return result
    } catch {
        network.release()
        let tail = network.eventLines.suffix(20).joined(separator: "\n")
        print("withSimulatedNetwork failed with seed \(chosen) (rerun: DUPLEX_SIMULATION_SEED=\(chosen)): \(error)\nlast events:\n\(tail)")
        throw error
    }
}

/// The seed of a simulation: `DUPLEX_SIMULATION_SEED` when `environment` has it, else `given`,
/// else a random one.
/// - Throws: ``InvalidSimulationSeed`` when the variable holds anything but a number.
package func simulationSeed(given: UInt64?, environment: [String: String]) throws -> UInt64 {
    guard let value = environment["DUPLEX_SIMULATION_SEED"] else { return given ?? UInt64.random(in: .min ... .max) }
    guard let seed = UInt64(value) else { throw InvalidSimulationSeed(value: value) }
    return seed
}

/// `DUPLEX_SIMULATION_SEED` is set to something that is not a seed (a number from 0 to
/// 18446744073709551615).
public struct InvalidSimulationSeed: Error, CustomStringConvertible {
    /// What the variable holds (its first 100 characters).
    public var value: String

    init(value: String) {
        self.value = String(value.prefix(100))
    }

    /// Says what is wrong.
    public var description: String {
        "DUPLEX_SIMULATION_SEED is \(value.debugDescription), not a seed: a number from 0 to \(UInt64.max)"
    }
}

/// A simulated test waited for something that could not come: nothing was left to run and
/// nothing was scheduled on the network's clock.
public struct SimulationStalled: Error, CustomStringConvertible {
    /// The network's seed.
    public var seed: UInt64
    /// The virtual time it stalled at.
    public var at: TestClock.Instant
    /// The event log's last lines.
    public var lastEvents: [String]

    /// Says what stalled, when, and with which seed.
    public var description: String {
        "the simulation stalled at \(at): nothing left to run or scheduled, and the test still waits (seed \(seed))"
    }
}

extension FaultProxy.LinkProfile {
    /// `instant`: no delay, no limit, no loss either way: on a ``SimulatedNetwork``, what is sent
    /// arrives at the same virtual instant, in order.
    public static let instant = FaultProxy.LinkProfile(
        name: "instant", downlink: Link(kilobitsPerSecond: nil, delay: .zero), uplink: Link(kilobitsPerSecond: nil, delay: .zero))
}
