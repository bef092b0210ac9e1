import ArgumentParser
import DuplexSchema
import DuplexRecordReplay
import Foundation
import Logging
import NIOConcurrencyHelpers

/// `duplex replay`: serves a cassette's recorded server side (``ReplayConfiguration``).
struct ReplayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Serve the server side of a recorded cassette (docs/cassettes.md) to clients.",
        discussion: """
            The n-th connection to a recorded path replays the n-th session recorded there (and \
            after the last, they start over): a WebSocket client gets the server's messages in \
            order, each once the client's messages recorded before it have arrived and its \
            recorded delay has passed; an SSE client gets the recorded events, after the one its \
            Last-Event-ID names. Prints one line when ready:
              duplex replay listening on HOST:PORT: 2 sessions (WebSocket /echo; SSE /events)
            Strict (the default): a client message that differs from the recording closes its \
            connection with 1008 and prints both sides on stderr:
              replay mismatch in session 1 (/echo), step 3:
                recorded: client text "hello"
                received: client text "hullo"
            Runs until SIGINT or SIGTERM; exits with status 1 if there was a mismatch.

            \(Failure.exitStatusHelp)
            """
    )

    @Argument(help: ArgumentHelp("The cassette: JSON lines, as duplex record writes them.", valueName: "file"))
    var file: String

    @Option(help: ArgumentHelp("Where clients connect; port 0 picks a free one.", valueName: "host:port"))
    var listen: String = "127.0.0.1:8090"

    @Option(help: ArgumentHelp("Play the recorded delays this many times faster.", valueName: "x"))
    var speed: Double = 1

    @Flag(help: "Send each step as soon as the client's messages before it have arrived.")
    var noDelays = false

    @Flag(help: "Do not check the client's messages against the recording.")
    var lenient = false

    // The server's own routes beside a cassette are duplex-server's (`--replay FILE`): this
    // command links no chat server. The flag stays to say so.
    @Flag(help: .hidden)
    var builtInRoutes = false

    @Flag(help: "Serve the chaos routes (/_chaos/...) too, as duplex-server --chaos does (a route= scope is replay).")
    var chaos = false

    func validate() throws {
        guard !builtInRoutes else {
            throw ValidationError(
                "--built-in-routes: the server's own routes are duplex-server's; serve them beside the cassette with duplex-server --replay \(file)")
        }
        guard speed.isFinite, speed > 0 else { throw ValidationError("--speed must be a number above 0 (got \(speed))") }
        _ = try loadCassette()
    }

    func loadCassette() throws -> Cassette {
        do {
            return try Cassette.load(path: file)
        } catch {
            throw ValidationError("\(error)")
        }
    }

    func run() async throws {
        let cassette = try loadCassette()
        let mismatched = NIOLockedValueBox(0)
        try await reportingFailures {
            let listenAt = try parseAddress(listen, option: "--listen")
            let replay = ReplayConfiguration(cassette: cassette, speed: noDelays ? .infinity : speed, strict: !lenient) { mismatch in
                mismatched.withLockedValue { $0 += 1 }
                printError(mismatch.description)
            }
            var logger = Logger(label: "duplex-replay")
            logger.logLevel = .critical
            let server = CassetteServer(address: listenAt.host, port: listenAt.port, mode: .replay(replay), chaos: chaos, logger: logger)
            try await serveUntilSignalled(server, listen: listen, logger: logger) { port in
                let shown = listenAt.host.contains(":") ? "[\(listenAt.host)]" : listenAt.host
                printOut("duplex replay listening on \(shown):\(port): \(Self.summary(of: cassette))")
            }
            let count = mismatched.withLockedValue { $0 }
            if count > 0 {
                throw Failure(.failed, "\(count) replay mismatch\(count == 1 ? "" : "es")")
            }
        }
    }

    /// `2 sessions (WebSocket /echo; SSE /events)`.
    static func summary(of cassette: Cassette) -> String {
        let count = cassette.sessions.count
        let kinds: [(Cassette.Session.Kind, String)] = [(.webSocket, "WebSocket"), (.eventStream, "SSE")]
        let paths = kinds.compactMap { kind, name -> String? in
            let paths = Set(cassette.sessions.filter { $0.kind == kind }.map(\.path)).sorted()
            return paths.isEmpty ? nil : "\(name) \(paths.joined(separator: " "))"
        }
        return "\(count) session\(count == 1 ? "" : "s")" + (paths.isEmpty ? "" : " (\(paths.joined(separator: "; ")))")
    }
}
