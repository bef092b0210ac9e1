import ArgumentParser
import Duplex
import DuplexRecordReplay
import Foundation
import Logging

/// `duplex record`: a recording proxy for WebSocket and SSE (``RecordConfiguration``).
struct RecordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Record the WebSocket and SSE sessions of a server into a cassette (docs/cassettes.md).",
        discussion: """
            Forwards every WebSocket connection and every GET, POST, PUT, PATCH and DELETE (an \
            SSE stream, with its method and body) made to --listen to the same path and query \
            on --upstream, and writes each session to --out as it happens: the request \
            (Authorization, Proxy-Authorization, Cookie and --redact headers replaced by \
            [redacted]; its method and body), the subprotocol, every message each way and every \
            event with its time, and how it ended. Prints one line when ready:
              duplex record listening on HOST:PORT, recording ws://HOST:PORT to FILE
            Runs until SIGINT or SIGTERM. Then serve the cassette with duplex replay FILE.

            \(Failure.exitStatusHelp)
            """
    )

    @Option(help: ArgumentHelp("Where clients connect; port 0 picks a free one.", valueName: "host:port"))
    var listen: String = "127.0.0.1:8091"

    @Option(help: ArgumentHelp("The server to record: ws://, wss://, http:// or https:// with a host and port.", valueName: "url"))
    var upstream: String

    @Option(help: ArgumentHelp("The cassette to write (replaced if it exists).", valueName: "file"))
    var out: String

    @Option(help: ArgumentHelp("A request header whose value is recorded as [redacted]; repeatable.", valueName: "name"))
    var redact: [String] = []

    @Option(help: ArgumentHelp("Trust the CA certificate(s) in this PEM file for a wss:// or https:// upstream.", valueName: "file"))
    var ca: String?

    @Flag(help: "Accept any TLS certificate from the upstream, unverified (for testing only).")
    var insecure = false

    func validate() throws {
        _ = try upstreamURL()
    }

    func upstreamURL() throws -> URL {
        guard let url = URL(string: upstream), ["ws", "wss", "http", "https"].contains(url.scheme?.lowercased() ?? ""), url.host != nil else {
            throw ValidationError("--upstream must be a ws://, wss://, http:// or https:// URL with a host (got \(upstream))")
        }
        return url
    }

    func run() async throws {
        try await reportingFailures {
            let listenAt = try parseAddress(listen, option: "--listen")
            let url = try upstreamURL()
            let trust: TLSTrust
            if insecure {
                trust = .insecureAcceptAnyCertificate
            } else if let ca {
                do {
                    trust = try .certificateAuthority(pemFile: ca)
                } catch {
                    throw Failure(.tls, "cannot read --ca \(ca): \(error)")
                }
            } else {
                trust = .systemRoots
            }
            let recorder: CassetteRecorder
            do {
                recorder = try CassetteRecorder(writingTo: out)
            } catch {
                throw Failure(.failed, "cannot write \(out): \(error.localizedDescription)")
            }
            let record = RecordConfiguration(upstream: url, recorder: recorder, redact: Set(redact), tlsTrust: trust)
            var logger = Logger(label: "duplex-record")
            logger.logLevel = .warning
            let server = CassetteServer(address: listenAt.host, port: listenAt.port, mode: .record(record), logger: logger)
            try await serveUntilSignalled(server, listen: listen, logger: logger) { port in
                let shown = listenAt.host.contains(":") ? "[\(listenAt.host)]" : listenAt.host
                printOut("duplex record listening on \(shown):\(port), recording \(upstream) to \(out)")
            }
        }
    }
}
