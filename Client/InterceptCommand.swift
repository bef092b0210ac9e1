import ArgumentParser
import Duplex
import DuplexRecordReplay
import DuplexScripted
import Foundation
import Logging

/// `duplex intercept`: your real backend in the loop, from a shell: a proxy for every WebSocket
/// connection, through rules, printing each message live.
struct InterceptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "intercept",
        abstract: "Proxy WebSocket connections to your real backend through rules, printing every message live (docs/scripts.md#proxy).",
        discussion: """
            Every WebSocket connection made to --listen is forwarded to --upstream, with the \
            client's path and query appended to it (ws://127.0.0.1:9000/feed?x=1 asks \
            UPSTREAM/feed?x=1), its headers but the hop's own, and the subprotocols it offers; \
            the client gets the upstream's subprotocol, its refusal, or 502 when it cannot be \
            reached. Each message each way goes through --rules, a JSON file with "toUpstream" \
            and "toClient" lists of rules (and "refuse"), as a script's "proxy" object has them, \
            and is printed with its time, its connection, where it came from or went, and what \
            a rule did:
              12:00:01.234 #1 from client    text "subscribe"  [forward]
              12:00:01.236 #1 to upstream    text "subscribe"  (forwarded)
            With --json, each line is a journal entry as GET /_journal writes them. Prints one \
            line when ready:
              duplex intercept listening on HOST:PORT, forwarding to UPSTREAM; journal at http://HOST:PORT/_journal
            Runs until SIGINT or SIGTERM. A rules file that cannot be used exits 64 with its place.

            \(Failure.exitStatusHelp)
            """
    )

    @Option(help: ArgumentHelp("Where clients connect; port 0 picks a free one.", valueName: "host:port"))
    var listen: String = "127.0.0.1:9000"

    @Option(help: ArgumentHelp("Your backend: a ws:// or wss:// URL with a host; the client's path is appended.", valueName: "url"))
    var upstream: String

    @Option(help: ArgumentHelp("A JSON file of rules: {\"toUpstream\": [...], \"toClient\": [...]} (docs/scripts.md#proxy).", valueName: "file"))
    var rules: String?

    @Option(help: ArgumentHelp("Trust the CA certificate(s) in this PEM file for a wss:// upstream.", valueName: "file"))
    var ca: String?

    @Flag(help: "Accept any TLS certificate from the upstream, unverified (for testing only).")
    var insecure = false

    @Flag(help: "Print each journal entry as a JSON line instead.")
    var json = false

    func validate() throws {
        _ = try proxyScript()
    }

    func upstreamURL() throws -> URL {
        guard let url = URL(string: upstream), ["ws", "wss"].contains(url.scheme?.lowercased() ?? ""), url.host?.isEmpty == false else {
            throw ValidationError("--upstream must be a ws:// or wss:// URL with a host (got \(upstream))")
        }
        return url
    }

    func run() async throws {
        var script = try proxyScript()
        script.appendsPath = true
        try await reportingFailures {
            let listenAt = try parseAddress(listen, option: "--listen")
            if insecure {
                script.tlsTrust = .insecureAcceptAnyCertificate
            } else if let ca {
                do {
                    script.tlsTrust = try .certificateAuthority(pemFile: ca)
                } catch {
                    throw Failure(.tls, "cannot read --ca \(ca): \(error)")
                }
            }
            let (lines, printer) = AsyncStream.makeStream(of: ScriptJournal.Entry.self, bufferingPolicy: .bufferingOldest(10_000))
            let journal = ScriptJournal(observer: { printer.yield($0) })
            var logger = Logger(label: "duplex-intercept")
            logger.logLevel = .warning
            let server = CassetteServer(
                address: listenAt.host, port: listenAt.port, mode: .proxy([.proxy("/**", script: script)], journal: journal), logger: logger)
            let asJSON = json
            let printing = Task {
                for await entry in lines { printOut(asJSON ? ScriptJournal.jsonLine(entry) : Self.line(entry)) }
            }
            defer { printing.cancel() }
            try await serveUntilSignalled(server, listen: listen, logger: logger) { port in
                let shown = listenAt.host.contains(":") ? "[\(listenAt.host)]" : listenAt.host
                printOut("duplex intercept listening on \(shown):\(port), forwarding to \(upstream); journal at http://\(shown):\(port)/_journal")
            }
        }
    }

    /// The rules of `--rules`, or none.
    private func proxyScript() throws -> ProxyScript {
        let url = try upstreamURL()
        guard let rules else { return ProxyScript(upstream: url) }
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: rules))
        } catch {
            throw ValidationError("--rules: cannot read \(rules): \((error as NSError).localizedDescription)")
        }
        do {
            return try ScriptFile.proxyRules(from: data, upstream: url)
        } catch {
            throw ValidationError("--rules: \(error) (in \(rules))")
        }
    }

    /// An entry as one line: its time, connection, where it came from or went, and what a rule did.
    static func line(_ entry: ScriptJournal.Entry) -> String {
        let time = entry.at.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true).time(includingFractionalSeconds: true))
        let place: String =
            switch (entry.leg, entry.direction) {
            case (.client?, .in): "from client  "
            case (.client?, .out): "to client    "
            case (.upstream?, .in): "from upstream"
            case (.upstream?, .out): "to upstream  "
            case (nil, .in): "from client  "
            case (nil, .out): "to client    "
            }
        var text = "\(time) #\(entry.connection) "
        switch entry.kind {
        case .open:
            let request = entry.request
            text += "open \(entry.path)" + (request?.query.map { "?\($0)" } ?? "") + (request?.subprotocol.map { " (subprotocol \($0))" } ?? "")
        case .refused:
            text += "refused \(entry.path) with \(entry.code ?? 0)" + (entry.data.map { ": \(Self.excerpt($0))" } ?? "")
        case .text:
            text += "\(place) text \(Self.excerpt(entry.data ?? "").debugDescription)"
        case .binary:
            text += "\(place) binary \(Data(base64Encoded: entry.data ?? "")?.count ?? 0) bytes"
        case .close:
            text +=
                "\(place) close" + (entry.code.map { " \($0)" } ?? "") + (entry.reason.flatMap { $0.isEmpty ? nil : " \($0.debugDescription)" } ?? "")
        case .drop:
            text += "\(place) dropped, no close frame"
        default:
            text += "\(place) \(entry.kind.rawValue)" + (entry.data.map { " \(Self.excerpt($0).debugDescription)" } ?? "")
        }
        if let action = entry.action {
            text += entry.direction == .in ? "  [\(action)]" : "  (\(action))"
        }
        return UntrustedText.visible(text)
    }

    private static func excerpt(_ text: String) -> String {
        text.count > 200 ? String(text.prefix(200)) + "…" : text
    }
}
