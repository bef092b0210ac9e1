import ArgumentParser
import DuplexFaultProxy
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import UnixSignals

/// `duplex proxy`: the testbed's fault proxy (``FaultProxy``) as a command, with a control
/// endpoint to change its toxics while it runs.
struct ProxyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "proxy",
        abstract: "Run a TCP proxy that injects network faults (latency, bandwidth, blackhole, resets, path switches, suspension, link profiles).",
        discussion: """
            Forwards every connection to --listen on to --upstream, applying the toxics set by \
            the flags to the --direction given. Prints three lines when ready:
              duplex proxy listening on HOST:PORT, forwarding to HOST:PORT
              duplex proxy seed N (--seed N makes the same random choices again)
              duplex proxy control on http://HOST:PORT
            Every random choice (jitter, slice sizes, whether a toxic with a toxicity below 1 \
            applies to a connection) comes from the seed, per connection in the order they are \
            accepted: the same seed and the same traffic make the same choices.
            Control endpoint (loopback by default), to change toxics while it runs:
              GET    /toxics                list the toxics, and the connection count
              POST   /toxics?type=T&...     add one: type=latency&ms=M[&jitter=M],
                                            type=bandwidth&rate=BYTES_PER_S, type=blackhole,
                                            type=reset-peer, type=close-after&bytes=N,
                                            type=slicer&size=N[&variation=N][&delay=MS],
                                            type=path-switch (the connections open now go
                                            half-open: nothing arrives either way, no FIN, no
                                            RST; new ones pass), type=suspend&ms=M (freeze,
                                            then deliver everything held, in order),
                                            type=profile&name=NAME (a link profile, as
                                            --profile);
                                            each with [&direction=both|upstream|downstream],
                                            [&toxicity=P], the probability (0 to 1) that it
                                            applies to a connection, and
                                            [&connections=all|open|new|N]: every connection,
                                            the ones open now, the ones opened later, or
                                            connection N (numbered from 1 as accepted)
              DELETE /toxics/ID             remove one
              DELETE /toxics                remove all: the path heals
              GET    /connections           the connections open now: number, age, bytes
                                            each way, and whether a path switch cut them
              POST   /drop                  close every proxied connection
            Example: curl -X POST 'http://127.0.0.1:9001/toxics?type=latency&ms=300'
            --scenario FILE applies a timeline of faults (docs/scenarios.md), one line each:
              duplex proxy scenario 2 s: step 1: add latency 300 ms (downstream), for 5 s
            and exits with status 1 if a step fails (a chaos step the server refused).

            \(Failure.exitStatusHelp)
            """
    )

    @Option(help: ArgumentHelp("Where clients connect.", valueName: "host:port"))
    var listen: String

    @Option(help: ArgumentHelp("Where connections are forwarded.", valueName: "host:port"))
    var upstream: String

    @Option(help: ArgumentHelp("Where the control endpoint listens; port 0 picks a free one.", valueName: "host:port"))
    var control: String = "127.0.0.1:0"

    @Option(help: ArgumentHelp("Which way the flags' toxics apply: both, upstream (client to server) or downstream.", valueName: "direction"))
    var direction: String = "both"

    @Option(help: ArgumentHelp("Delay each chunk by this many milliseconds.", valueName: "ms"))
    var latency: Int?

    @Option(help: ArgumentHelp("Vary the latency by up to ± this many milliseconds.", valueName: "ms"))
    var jitter: Int = 0

    @Option(help: ArgumentHelp("Let through at most this many bytes per second.", valueName: "bytes"))
    var bandwidth: Int?

    @Flag(help: "Forward nothing, and keep connections open: a dead path.")
    var blackhole = false

    @Flag(help: "Reset connections (TCP RST) as soon as data passes.")
    var resetPeer = false

    @Option(help: ArgumentHelp("Close each connection after this many bytes.", valueName: "bytes"))
    var closeAfter: Int?

    @Option(help: ArgumentHelp("Split data into pieces of about this many bytes.", valueName: "bytes"))
    var slice: Int?

    @Option(help: ArgumentHelp("Milliseconds between slices.", valueName: "ms"))
    var sliceDelay: Int = 0

    @Option(help: ArgumentHelp("Vary slice sizes by up to ± this many bytes.", valueName: "bytes"))
    var sliceVariation: Int = 0

    @Option(
        help: ArgumentHelp(
            "Shape the link as a named profile with the Network Link Conditioner's figures (docs/scenarios.md): \(FaultProxy.LinkProfile.all.map(\.name).joined(separator: ", ")). Loss stalls the stream as TCP retransmission does; no byte is dropped.",
            valueName: "name"
        )
    )
    var profile: String?

    @Option(help: ArgumentHelp("The probability, from 0 to 1, that the flags' toxics apply to a connection.", valueName: "p"))
    var toxicity: Double = 1

    @Option(
        help: ArgumentHelp("The seed of every random choice; printed at start (the scenario's, or a random one, when not given).", valueName: "n"))
    var seed: UInt64?

    @Option(
        help: ArgumentHelp(
            "Apply a scenario file's timeline of faults (docs/scenarios.md); each step prints a line as it takes effect.", valueName: "file"))
    var scenario: String?

    func validate() throws {
        guard FaultProxy.Direction(name: direction) != nil else { throw ValidationError("--direction must be both, upstream or downstream") }
        if let profile, FaultProxy.LinkProfile(name: profile) == nil {
            let names = FaultProxy.LinkProfile.all.map(\.name).joined(separator: ", ")
            throw ValidationError("--profile must be one of \(names), not \"\(profile)\"")
        }
        do {
            _ = try flagToxics()
        } catch let error as FaultProxy.InvalidToxic {
            throw ValidationError(error.message)
        }
        do {
            _ = try loadScenario()
        } catch let error as FaultScenario.Invalid {
            throw ValidationError("--scenario: \(error.message)")
        }
    }

    func loadScenario() throws -> FaultScenario? {
        try scenario.map { try FaultScenario(contentsOf: $0) }
    }

    /// The toxics the flags ask for, with their description.
    func flagToxics() throws -> [(toxic: FaultProxy.Toxic, fields: [String: String])] {
        var specs: [[String: String]] = []
        if let latency { specs.append(["type": "latency", "ms": "\(latency)", "jitter": "\(jitter)"]) }
        if let bandwidth { specs.append(["type": "bandwidth", "rate": "\(bandwidth)"]) }
        if blackhole { specs.append(["type": "blackhole"]) }
        if resetPeer { specs.append(["type": "reset-peer"]) }
        if let closeAfter { specs.append(["type": "close-after", "bytes": "\(closeAfter)"]) }
        if let profile { specs.append(["type": "profile", "name": profile]) }
        if let slice { specs.append(["type": "slicer", "size": "\(slice)", "variation": "\(sliceVariation)", "delay": "\(sliceDelay)"]) }
        if toxicity != 1 {
            for index in specs.indices { specs[index]["toxicity"] = "\(toxicity)" }
        }
        return try specs.map { (try FaultProxy.Toxic(fields: $0), $0) }
    }

    func run() async throws {
        try await reportingFailures {
            let listenAt = try parseAddress(listen, option: "--listen")
            let upstreamAt = try parseAddress(upstream, option: "--upstream")
            let controlAt = try parseAddress(control, option: "--control")
            let scenario = try loadScenario()
            let proxy: FaultProxy
            do {
                proxy = try await FaultProxy.start(
                    host: listenAt.host,
                    port: listenAt.port,
                    upstreamHost: upstreamAt.host,
                    upstreamPort: upstreamAt.port,
                    seed: seed ?? scenario?.seed
                )
            } catch {
                throw Failure(.unreachable, "cannot listen on \(listen): \(error)")
            }
            let registry = ToxicRegistry(proxy: proxy)
            let flagDirection = FaultProxy.Direction(name: direction) ?? .both
            for (toxic, fields) in try flagToxics() {
                registry.add(toxic, direction: flagDirection, fields: fields)
            }
            let server: any Channel
            do {
                server = try await ControlServer.start(host: controlAt.host, port: controlAt.port, handle: registry.handle)
            } catch {
                await proxy.stop()
                throw Failure(.unreachable, "cannot serve the control endpoint on \(control): \(error)")
            }
            let port = server.localAddress?.port ?? controlAt.port
            let shown = controlAt.host.contains(":") ? "[\(controlAt.host)]" : controlAt.host
            printOut("duplex proxy listening on \(listenAt.host):\(proxy.port), forwarding to \(upstreamAt.host):\(upstreamAt.port)")
            printOut("duplex proxy seed \(proxy.seed) (--seed \(proxy.seed) makes the same random choices again)")
            printOut("duplex proxy control on http://\(shown):\(port)")
            // Runs until SIGTERM or SIGINT, or until the scenario fails; a scenario that ends
            // leaves the proxy running with what it left in place.
            let ended: Result<Void, any Error>
            do {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for await _ in await UnixSignalsSequence(trapping: .sigterm, .sigint) { break }
                    }
                    if let scenario {
                        group.addTask {
                            try await scenario.run(on: proxy) { printOut("duplex proxy \($0)") }
                            // Then the proxy serves on, until a signal.
                            try await Task.sleep(for: .seconds(100 * 365 * 86_400))
                        }
                    }
                    try await group.next()
                    group.cancelAll()
                }
                ended = .success(())
            } catch {
                ended = .failure(error)
            }
            try? await server.close()
            await proxy.stop()
            if case .failure(let error) = ended {
                throw Failure(.failed, "scenario: \(error)")
            }
        }
    }
}

/// The toxics added through the command, numbered for the control endpoint.
final class ToxicRegistry: Sendable {
    private let proxy: FaultProxy
    private let entries = NIOLockedValueBox<(next: Int, byID: [Int: (id: FaultProxy.ToxicID, fields: [String: String])])>((1, [:]))

    init(proxy: FaultProxy) {
        self.proxy = proxy
    }

    @discardableResult
    func add(_ toxic: FaultProxy.Toxic, direction: FaultProxy.Direction, fields: [String: String] = [:]) -> Int {
        let id = proxy.add(toxic, direction: direction)
        var described = fields
        described["direction"] = "\(direction)"
        return entries.withLockedValue { entries in
            let number = entries.next
            entries.next += 1
            entries.byID[number] = (id, described)
            return number
        }
    }

    /// Answers one control request (the routes `duplex proxy --help` lists).
    @Sendable func handle(_ request: ControlServer.Request) -> ControlServer.Reply {
        switch (request.method, request.path.split(separator: "/", omittingEmptySubsequences: true)) {
        case (.GET, ["toxics"]):
            return json(.ok, listing())
        case (.POST, ["toxics"]):
            var fields: [String: String] = [:]
            for (key, value) in request.query { fields[key] = value }
            guard let direction = FaultProxy.Direction(name: fields["direction"] ?? "both") else {
                return json(.badRequest, ["error": "direction must be both, upstream or downstream"])
            }
            do {
                let toxic = try FaultProxy.Toxic(fields: fields)
                fields["direction"] = nil
                return json(.created, ["id": add(toxic, direction: direction, fields: fields)])
            } catch let error as FaultProxy.InvalidToxic {
                return json(.badRequest, ["error": error.message])
            } catch {
                return json(.badRequest, ["error": "\(error)"])
            }
        case (.DELETE, let parts) where parts.count == 2 && parts[0] == "toxics":
            guard let number = Int(parts[1]), let entry = entries.withLockedValue({ $0.byID.removeValue(forKey: number) }) else {
                return json(.notFound, ["error": "no such toxic"])
            }
            proxy.remove(entry.id)
            return json(.ok, ["removed": number])
        case (.DELETE, ["toxics"]):
            let count = entries.withLockedValue { entries in
                defer { entries.byID = [:] }
                return entries.byID.count
            }
            proxy.removeAll()
            return json(.ok, ["removed": count])
        case (.GET, ["connections"]):
            let connections = proxy.connections.map { connection -> [String: Any] in
                [
                    "id": connection.number,
                    "ageMs": Int(connection.age / .milliseconds(1)),
                    "bytesUpstream": connection.bytesUpstream,
                    "bytesDownstream": connection.bytesDownstream,
                    "severed": connection.severed,
                ]
            }
            return json(.ok, ["connections": connections])
        case (.POST, ["drop"]):
            let count = proxy.connectionCount
            proxy.dropAll()
            return json(.ok, ["accepted": count])
        case (_, ["toxics"]), (_, ["drop"]), (_, ["connections"]):
            return json(.methodNotAllowed, ["error": "\(request.method) is not allowed on \(request.path)"])
        default:
            return json(.notFound, ["error": "no such endpoint: \(request.path)"])
        }
    }

    private func listing() -> [String: Any] {
        // A suspension removes itself when its time is up: it leaves the list then.
        let current = entries.withLockedValue { entries in
            entries.byID = entries.byID.filter { proxy.isActive($0.value.id) }
            return entries.byID
        }
        let toxics = current.sorted { $0.key < $1.key }.map { number, entry -> [String: Any] in
            var object: [String: Any] = ["id": number]
            for (key, value) in entry.fields { object[key] = Int(value).map { $0 as Any } ?? Double(value).map { $0 as Any } ?? value }
            return object
        }
        return ["toxics": toxics, "connections": proxy.connectionCount, "seed": "\(proxy.seed)"]
    }

    private func json(_ status: HTTPResponseStatus, _ object: [String: Any]) -> ControlServer.Reply {
        ControlServer.Reply(status: status, json: (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8))
    }
}
