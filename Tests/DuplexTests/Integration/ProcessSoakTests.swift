import Duplex
import DuplexSchema
import DuplexTesting
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import NIOConcurrencyHelpers
import TestSupport
import Testing

/// The soak on real processes: two `duplex-server` processes on one PostgreSQL store, 40
/// `ChatClient`s in 4 rooms (each room spread over both nodes), each node behind a `FaultProxy`,
/// and a random fault of eight kinds every so often: a proxy drop, latency, a blackhole, a reset,
/// a server-side drop and stall over `/_chaos/`, and node A restarted as a process (SIGTERM, or
/// SIGKILL) with a new process in its place. Checked as the in-process soak is: nothing lost,
/// duplicated or out of order; node B's memory (it is never restarted) at the start and the end.
/// Off unless DUPLEX_SOAK is set; give it release servers:
///
///     swift build -c release --product duplex-server
///     DUPLEX_SOAK=1 DUPLEX_SOAK_SECONDS=1800 DUPLEX_BIN_DIR=.build/release \
///         swift test --filter ProcessSoakTests
@Suite("soak on processes and PostgreSQL", .enabled(if: ProcessInfo.processInfo.environment["DUPLEX_SOAK"] != nil))
struct ProcessSoakTests {
    /// A node: its process now, and the proxy its members go through.
    final class Node: Sendable {
        let name: String
        let store: String
        let proxy: FaultProxy
        private let current: NIOLockedValueBox<(process: CLIProcess, port: Int)>

        private init(name: String, store: String, proxy: FaultProxy, process: CLIProcess, port: Int) {
            self.name = name
            self.store = store
            self.proxy = proxy
            current = NIOLockedValueBox((process, port))
        }

        static func start(_ name: String, store: String) async throws -> Node {
            let (process, port) = try await launch(store)
            let proxy = try await FaultProxy.start(upstreamPort: port)
            return Node(name: name, store: store, proxy: proxy, process: process, port: port)
        }

        private static func launch(_ store: String) async throws -> (CLIProcess, Int) {
            try await CLIProcess.server(["--store", store, "--chaos", "--log-level", "warning"])
        }

        var process: CLIProcess { current.withLockedValue { $0.process } }
        var port: Int { current.withLockedValue { $0.port } }

        /// Ends the process with `signal`, starts a new one on the same store and points the
        /// proxy at it. Returns how long the node was away.
        func restart(with signal: Int32) async throws -> Duration {
            let began = ContinuousClock.now
            let old = process
            old.signal(signal)
            _ = try await old.waitForExit(within: .seconds(30))
            let (process, port) = try await Self.launch(store)
            current.withLockedValue { $0 = (process, port) }
            proxy.setUpstream(port: port)
            return ContinuousClock.now - began
        }

        /// `POST /_chaos/<path>` on the node.
        func chaos(_ path: String) async {
            var request = URLRequest(url: URL(string: "http://127.0.0.1:\(port)/_chaos/\(path)")!)
            request.httpMethod = "POST"
            request.timeoutInterval = 5
            let status = (try? await URLSession.shared.data(for: request)).map { ($0.1 as? HTTPURLResponse)?.statusCode ?? 0 }
            #expect(status == 200 || status == 204 || status == nil, "POST /_chaos/\(path) on \(name): \(status.map(String.init) ?? "no answer")")
        }

        /// The process's resident memory, in KiB, from /proc.
        var residentKiB: Int? {
            guard let status = try? String(contentsOfFile: "/proc/\(process.pid)/status", encoding: .utf8),
                let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
            else { return nil }
            return Int(line.split(separator: " ").dropFirst().first ?? "")
        }
    }

    @Test("two nodes on PostgreSQL, 40 clients, eight fault kinds with process restarts: zero loss, zero duplication")
    func soak() async throws {
        let seconds = SoakTests.seconds
        try await withTimeout(.seconds(seconds + 300)) {
            let cluster = try await PostgresCluster.shared
            let store = try await cluster.createDatabase()
            let a = try await Node.start("A", store: store)
            let b = try await Node.start("B", store: store)
            let nodes = [a, b]
            let members = (0..<40).map { i in
                SoakTests.Member(name: "m\(i)", room: "r\(i % 4)", base: "ws://127.0.0.1:\(nodes[(i / 4) % 2].proxy.port)")
            }
            var readers: [Task<Void, Never>] = []
            for member in members { readers.append(try await member.start()) }
            let startKiB = b.residentKiB
            var samples: [Int] = startKiB.map { [$0] } ?? []
            let end = ContinuousClock.now + .seconds(seconds)
            let faults = NIOLockedValueBox<[String]>([])
            let away = NIOLockedValueBox<[Duration]>([])
            // The sleeps below pace the faults; nothing waits on them for an event.
            let chaos = Task {
                while ContinuousClock.now < end {
                    try? await Task.sleep(for: .milliseconds(Int.random(in: SoakTests.faultPause)))
                    let node = nodes.randomElement()!
                    let room = "r\(Int.random(in: 0..<4))"
                    let kind = Int(ProcessInfo.processInfo.environment["DUPLEX_SOAK_FAULT"] ?? "") ?? Int.random(in: 0..<8)
                    switch kind {
                    case 0:
                        node.proxy.dropAll()
                        faults.withLockedValue { $0.append("proxy drop") }
                    case 1:
                        let id = node.proxy.add(.latency(.milliseconds(300), jitter: .milliseconds(100)), direction: .both)
                        faults.withLockedValue { $0.append("latency") }
                        try? await Task.sleep(for: .seconds(1))
                        node.proxy.remove(id)
                    case 2:
                        let id = node.proxy.add(.blackhole, direction: .both)
                        faults.withLockedValue { $0.append("blackhole") }
                        try? await Task.sleep(for: .seconds(2))
                        node.proxy.remove(id)
                    case 3:
                        _ = node.proxy.add(.resetPeer, direction: .both)
                        node.proxy.removeAll()
                        faults.withLockedValue { $0.append("reset") }
                    case 4:
                        await node.chaos("drop?room=\(room)")
                        faults.withLockedValue { $0.append("server drop") }
                    case 5:
                        await node.chaos("stall?ms=2000&room=\(room)")
                        faults.withLockedValue { $0.append("server stall") }
                    case 6:
                        do {
                            let took = try await a.restart(with: SIGTERM)
                            away.withLockedValue { $0.append(took) }
                            faults.withLockedValue { $0.append("process restart (SIGTERM)") }
                        } catch {
                            Issue.record("node A did not restart after SIGTERM: \(error)")
                        }
                    default:
                        do {
                            let took = try await a.restart(with: SIGKILL)
                            away.withLockedValue { $0.append(took) }
                            faults.withLockedValue { $0.append("process kill (SIGKILL)") }
                        } catch {
                            Issue.record("node A did not restart after SIGKILL: \(error)")
                        }
                    }
                }
            }
            // Node B's memory once a minute, to see whether it grows.
            let sampling = Task {
                var taken: [Int] = []
                while ContinuousClock.now < end {
                    try? await Task.sleep(for: .seconds(60))
                    if let kib = b.residentKiB { taken.append(kib) }
                }
                return taken
            }
            print(
                "process soak: 40 clients joined on 2 nodes, running \(seconds) s, a fault every \(SoakTests.faultPause) ms; node B \(startKiB ?? 0) KiB"
            )
            await SoakTests.talk(members, until: end)
            await chaos.value
            samples += await sampling.value
            for node in nodes { node.proxy.removeAll() }
            let report = await SoakTests.verify(members, faults: faults.withLockedValue { $0 })
            let endKiB = b.residentKiB
            let downs = away.withLockedValue { $0 }.map { $0 / .milliseconds(1) }.sorted()
            let median = downs.isEmpty ? 0 : Int(downs[downs.count / 2])
            print("process soak: \(seconds) s, 40 clients on 2 nodes, \(report)")
            print(
                "process soak: node A restarted \(downs.count) times (median \(median) ms away); node B resident \(startKiB ?? 0) KiB at the start, \(endKiB ?? 0) KiB at the end; once a minute: \(samples.map(String.init).joined(separator: " "))"
            )
            #expect(report.lost == 0 && report.acked > 0)
            for member in members { await member.client.leave() }
            for reader in readers { reader.cancel() }
            for node in nodes {
                await node.proxy.stop()
                node.process.signal(SIGTERM)
                _ = try? await node.process.waitForExit(within: .seconds(30))
            }
        }
    }
}
