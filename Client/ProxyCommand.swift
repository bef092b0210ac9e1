import ArgumentParser
import DuplexTesting
import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import UnixSignals

/// `duplex proxy`: the testbed's fault proxy (``FaultProxy``) as a command, with a control
/// endpoint to change its toxics while it runs.
struct ProxyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "proxy",
        abstract: "Run a TCP proxy that injects network faults (latency, bandwidth, blackhole, resets).",
        discussion: """
            Forwards every connection to --listen on to --upstream, applying the toxics set by \
            the flags to the --direction given. Prints two lines when ready:
              duplex proxy listening on HOST:PORT, forwarding to HOST:PORT
              duplex proxy control on http://HOST:PORT
            Control endpoint (loopback by default), to change toxics while it runs:
              GET    /toxics                list the toxics, and the connection count
              POST   /toxics?type=T&...     add one: type=latency&ms=M[&jitter=M],
                                            type=bandwidth&rate=BYTES_PER_S, type=blackhole,
                                            type=reset-peer, type=close-after&bytes=N,
                                            type=slicer&size=N[&variation=N][&delay=MS];
                                            each with [&direction=both|upstream|downstream]
              DELETE /toxics/ID             remove one
              DELETE /toxics                remove all: the path heals
              POST   /drop                  close every proxied connection
            Example: curl -X POST 'http://127.0.0.1:9001/toxics?type=latency&ms=300'

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

    func validate() throws {
        guard ToxicSpec.direction(direction) != nil else { throw ValidationError("--direction must be both, upstream or downstream") }
        do {
            _ = try flagToxics()
        } catch let error as ToxicSpec.Invalid {
            throw ValidationError(error.message)
        }
    }

    /// The toxics the flags ask for, with their description.
    func flagToxics() throws -> [(toxic: FaultProxy.Toxic, fields: [String: String])] {
        var specs: [[String: String]] = []
        if let latency { specs.append(["type": "latency", "ms": "\(latency)", "jitter": "\(jitter)"]) }
        if let bandwidth { specs.append(["type": "bandwidth", "rate": "\(bandwidth)"]) }
        if blackhole { specs.append(["type": "blackhole"]) }
        if resetPeer { specs.append(["type": "reset-peer"]) }
        if let closeAfter { specs.append(["type": "close-after", "bytes": "\(closeAfter)"]) }
        if let slice { specs.append(["type": "slicer", "size": "\(slice)", "delay": "\(sliceDelay)"]) }
        return try specs.map { (try ToxicSpec.toxic($0), $0) }
    }

    func run() async throws {
        try await reportingFailures {
            let listenAt = try parseAddress(listen, option: "--listen")
            let upstreamAt = try parseAddress(upstream, option: "--upstream")
            let controlAt = try parseAddress(control, option: "--control")
            let proxy: FaultProxy
            do {
                proxy = try await FaultProxy.start(host: listenAt.host, port: listenAt.port, upstreamHost: upstreamAt.host, upstreamPort: upstreamAt.port)
            } catch {
                throw Failure(.unreachable, "cannot listen on \(listen): \(error)")
            }
            let registry = ToxicRegistry(proxy: proxy)
            let flagDirection = ToxicSpec.direction(direction) ?? .both
            for (toxic, fields) in try flagToxics() {
                registry.add(toxic, direction: flagDirection, fields: fields)
            }
            let router = Router()
            registry.addRoutes(to: router)
            let app = Application(
                router: router,
                configuration: .init(address: .hostname(controlAt.host, port: controlAt.port), serverName: "duplex-proxy"),
                onServerRunning: { channel in
                    let port = channel.localAddress?.port ?? controlAt.port
                    let shown = controlAt.host.contains(":") ? "[\(controlAt.host)]" : controlAt.host
                    printOut("duplex proxy listening on \(listenAt.host):\(proxy.port), forwarding to \(upstreamAt.host):\(upstreamAt.port)")
                    printOut("duplex proxy control on http://\(shown):\(port)")
                }
            )
            do {
                try await app.runService(gracefulShutdownSignals: [.sigterm, .sigint])
            } catch {
                await proxy.stop()
                throw Failure(.unreachable, "cannot serve the control endpoint on \(control): \(error)")
            }
            await proxy.stop()
        }
    }
}

/// Toxics described by name and parameters, as the flags and the control endpoint give them.
enum ToxicSpec {
    struct Invalid: Error {
        var message: String
    }

    static func direction(_ text: String) -> FaultProxy.Direction? {
        switch text {
        case "both": .both
        case "upstream", "up": .upstream
        case "downstream", "down": .downstream
        default: nil
        }
    }

    static func toxic(_ fields: [String: String]) throws -> FaultProxy.Toxic {
        func number(_ key: String, default value: Int? = nil, minimum: Int = 0) throws -> Int {
            guard let text = fields[key] else {
                if let value { return value }
                throw Invalid(message: "\(fields["type"] ?? "the toxic") needs \(key)=N")
            }
            guard let parsed = Int(text), parsed >= minimum else {
                throw Invalid(message: "\(key) must be an integer of at least \(minimum), not \"\(text)\"")
            }
            return parsed
        }
        switch fields["type"] {
        case "latency":
            return .latency(.milliseconds(try number("ms")), jitter: .milliseconds(try number("jitter", default: 0)))
        case "bandwidth":
            return .bandwidth(bytesPerSecond: try number("rate", minimum: 1))
        case "blackhole":
            return .blackhole
        case "reset-peer":
            return .resetPeer
        case "close-after":
            return .closeAfter(bytes: try number("bytes"))
        case "slicer":
            return .slicer(
                averageSize: try number("size", minimum: 1),
                sizeVariation: try number("variation", default: 0),
                delay: .milliseconds(try number("delay", default: 0))
            )
        case let other:
            throw Invalid(message: "type must be latency, bandwidth, blackhole, reset-peer, close-after or slicer, not \(other.map { "\"\($0)\"" } ?? "missing")")
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

    func addRoutes(to router: Router<BasicRequestContext>) {
        router.get("toxics") { _, _ in
            self.json(.ok, self.listing())
        }
        router.post("toxics") { request, _ in
            var fields: [String: String] = [:]
            for (key, value) in request.uri.queryParameters { fields[String(key)] = String(value) }
            guard let direction = ToxicSpec.direction(fields["direction"] ?? "both") else {
                return self.json(.badRequest, ["error": "direction must be both, upstream or downstream"])
            }
            do {
                let toxic = try ToxicSpec.toxic(fields)
                fields["direction"] = nil
                return self.json(.created, ["id": self.add(toxic, direction: direction, fields: fields)])
            } catch let error as ToxicSpec.Invalid {
                return self.json(.badRequest, ["error": error.message])
            }
        }
        router.delete("toxics/:id") { _, context in
            guard let number = context.parameters.get("id", as: Int.self),
                let entry = self.entries.withLockedValue({ $0.byID.removeValue(forKey: number) })
            else {
                return self.json(.notFound, ["error": "no such toxic"])
            }
            self.proxy.remove(entry.id)
            return self.json(.ok, ["removed": number])
        }
        router.delete("toxics") { _, _ in
            let count = self.entries.withLockedValue { entries in
                defer { entries.byID = [:] }
                return entries.byID.count
            }
            self.proxy.removeAll()
            return self.json(.ok, ["removed": count])
        }
        router.post("drop") { _, _ in
            let count = self.proxy.connectionCount
            self.proxy.dropAll()
            return self.json(.ok, ["accepted": count])
        }
    }

    private func listing() -> [String: Any] {
        let toxics = entries.withLockedValue { $0.byID }.sorted { $0.key < $1.key }.map { number, entry -> [String: Any] in
            var object: [String: Any] = ["id": number]
            for (key, value) in entry.fields { object[key] = Int(value) ?? value as Any }
            return object
        }
        return ["toxics": toxics, "connections": proxy.connectionCount]
    }

    private func json(_ status: HTTPResponse.Status, _ object: [String: Any]) -> Response {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8)
        var headers = HTTPFields()
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
