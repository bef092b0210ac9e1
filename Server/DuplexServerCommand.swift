import ArgumentParser
import DuplexSchema
import DuplexServer
import DuplexRecordReplay
import DuplexPostgres
import Foundation
import Logging
import NIOCore
import ServiceLifecycle
import UnixSignals

/// `duplex-server`: runs the Duplex loopback server until SIGINT or SIGTERM.
@main
struct DuplexServerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "duplex-server",
        abstract: "A loopback WebSocket and Server-Sent Events server to test real-time clients against.",
        discussion: """
            Routes: GET /health, WS /echo, WS /chat/{room}?name=NAME[&since=SEQ&epoch=E][&token=T], \
            GET /events[?interval=MS], GET /chat/{room}/events.
            Prints one line when it listens: "duplex-server listening on http://HOST:PORT" \
            (https://, with "(CA: FILE)" for --tls-self-signed).
            SIGINT and SIGTERM shut it down gracefully: WebSocket peers get close 1001 and SSE \
            streams end; connections still open after --shutdown-timeout are closed hard; the \
            exit status is then 0. docs/server.md lists every flag and limit.
            With --chaos, POST /_chaos/drop, /_chaos/close?code=C, /_chaos/stall?ms=M, \
            /_chaos/end-sse, /_chaos/refuse?ms=M and /_chaos/restart?ms=M break connections on purpose \
            (scope them with ?route=echo|chat|events|chat-events or ?room=NAME).
            With --store postgres://USER@HOST:PORT/DB (or DUPLEX_STORE), every server on that database \
            serves the same chat rooms, which survive restarts (docs/server.md, "Running several nodes").
            """
    )

    @Option(help: "The address to listen on.")
    var host: String = "127.0.0.1"

    @Option(help: "The port to listen on; 0 picks a free one, which the listening line reports.")
    var port: Int = 8080

    @Option(help: "Log level: trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = "info"

    @Option(help: "Log format on standard error: text, or json (one object per line, for log shippers).")
    var logFormat: String = "text"

    @Option(help: "How many events each chat room keeps for resumes.")
    var history: Int = 1000

    @Option(help: "The largest WebSocket message accepted, in bytes; larger ones get close 1009.")
    var maxMessageBytes: Int = 16 * 1024 * 1024

    @Flag(help: "Serve the /_chaos/ fault endpoints (drop, close, stall, end-sse, refuse) to loopback peers.")
    var chaos = false

    @Option(help: ArgumentHelp("The most chat rooms held; past it the least recently used empty room is evicted.", valueName: "count"))
    var maxRooms: Int = 256

    @Option(help: ArgumentHelp("Bytes of history each chat room keeps.", valueName: "bytes"))
    var historyBytes: Int = 1024 * 1024

    @Option(help: ArgumentHelp("Bytes of history all chat rooms together keep.", valueName: "bytes"))
    var totalHistoryBytes: Int = 64 * 1024 * 1024

    @Option(
        help: ArgumentHelp(
            "Bytes that may wait for one slow client before it is disconnected (1013, or the end of its SSE stream).", valueName: "bytes"))
    var queueBytes: Int = 1024 * 1024

    @Option(help: ArgumentHelp("The most TCP connections served at once; more get 503.", valueName: "count"))
    var maxConnections: Int = 10_000

    @Option(help: ArgumentHelp("Seconds a connection may take to send a complete request head.", valueName: "seconds"))
    var requestHeadTimeout: Double = 10

    @Option(help: ArgumentHelp("Seconds a keep-alive HTTP connection may stay idle.", valueName: "seconds"))
    var idleTimeout: Double = 60

    @Option(help: ArgumentHelp("Seconds a graceful shutdown waits for connections before closing them hard.", valueName: "seconds"))
    var shutdownTimeout: Double = 10

    @Option(
        help: ArgumentHelp(
            "Subprotocols /echo may select, in order of preference (comma-separated); by default it selects the client's first.", valueName: "list"))
    var echoSubprotocols: String?

    @Flag(help: "Turn permessage-deflate off (it is negotiated with clients that offer it).")
    var noCompression = false

    @Option(help: ArgumentHelp("Messages smaller than this are sent uncompressed.", valueName: "bytes"))
    var compressionThreshold = 256

    @Option(
        help: ArgumentHelp(
            "The LZ77 window, in bits (9 to 15), the server compresses with and asks clients to compress with. Each idle /echo connection that compressed keeps up to 2^bits bytes each way.",
            valueName: "bits"))
    var compressionWindowBits = 12

    @Option(
        help: ArgumentHelp(
            "Where chat rooms live: memory (the default), or postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=require] to share rooms with every server on that database and keep them across restarts. Default: $DUPLEX_STORE, else memory.",
            valueName: "store"
        )
    )
    var store: String?

    @Option(help: ArgumentHelp("Seconds a starting server tries to reach the PostgreSQL store before it exits with an error.", valueName: "seconds"))
    var storeStartupTimeout: Double = 30

    @Option(
        help: ArgumentHelp(
            "Seconds a server's lease in the PostgreSQL store lasts: the members of a server that stops renewing it are removed after this.",
            valueName: "seconds"))
    var storeLease: Double = 10

    @Option(
        help: ArgumentHelp(
            "Seconds a query to the PostgreSQL store may take before it counts as failed: a say waiting on it is refused with store_unavailable (1013).",
            valueName: "seconds"))
    var storeQueryTimeout: Double = 5

    @Option(
        help: ArgumentHelp(
            "Serve every route over TLS (https://, wss://) with the certificate chain in this PEM file; needs --tls-key.", valueName: "file"))
    var tlsCert: String?

    @Option(help: ArgumentHelp("The private key of --tls-cert, PEM.", valueName: "file"))
    var tlsKey: String?

    @Flag(
        help:
            "Serve over TLS with a CA and a certificate for localhost, 127.0.0.1 and ::1 made at start; the CA's PEM file is named on the listening line, with a client certificate it issued next to it (client.pem, client-key.pem)."
    )
    var tlsSelfSigned = false

    @Option(
        help: ArgumentHelp(
            "Where --tls-self-signed writes ca.pem, client.pem and client-key.pem; by default a new folder in the temporary directory.",
            valueName: "folder"))
    var tlsDirectory: String?

    @Option(help: ArgumentHelp("Require a client certificate issued by a CA in this PEM file (mutual TLS).", valueName: "file"))
    var tlsClientCa: String?

    @Flag(help: "With --tls-self-signed: one more listener per TLS fault (expired, wrong-host, self-signed, ...); GET /tls-faults lists their URLs.")
    var tlsFaults = false

    @Flag(help: "With TLS: offer only http/1.1 by ALPN, not h2 (HTTP/2, with WebSockets through extended CONNECT).")
    var noHttp2 = false

    @Option(help: ArgumentHelp("With TLS and HTTP/2: the most streams one connection may have open at once.", valueName: "count"))
    var http2MaxStreams = 100

    @Option(
        help: ArgumentHelp(
            "Event-loop threads; by default one per CPU the process may use (its affinity mask, as taskset sets it, and its cgroup's cpuset or CPU quota).",
            valueName: "count"))
    var eventLoops: Int?

    @Option(
        help: ArgumentHelp(
            "Serve the scripted WebSocket, SSE, proxy and protocol-preset (GraphQL, Socket.IO, MQTT) routes of this JSON file beside the built-in ones (docs/scripts.md); GET /_journal shows what they served and received.",
            valueName: "file"))
    var script: String?

    @Option(
        help: ArgumentHelp(
            "Replay this cassette (docs/cassettes.md) beside the built-in routes: its paths come first; a client message that differs from the recording is logged as an error and closes its connection with 1008.",
            valueName: "file"))
    var replay: String?

    @Option(
        help: ArgumentHelp(
            #"Faults on what /echo sends back, as a script's "faults" object: '{"dropAfterSending":3,"delaySendsMs":50}' (docs/scripts.md)."#,
            valueName: "json"))
    var echoFaults: String?

    func validate() throws {
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        guard ["text", "json"].contains(logFormat) else { throw ValidationError("--log-format must be text or json") }
        guard (0...65535).contains(port) else { throw ValidationError("--port must be from 0 to 65535") }
        if let eventLoops, !(1...1024).contains(eventLoops) { throw ValidationError("--event-loops must be from 1 to 1024") }
        guard history >= 0 else { throw ValidationError("--history must not be negative") }
        guard maxMessageBytes >= 125 else { throw ValidationError("--max-message-bytes must be at least 125") }
        guard maxRooms >= 1 else { throw ValidationError("--max-rooms must be at least 1") }
        guard historyBytes >= 0, totalHistoryBytes >= 0 else {
            throw ValidationError("--history-bytes and --total-history-bytes must not be negative")
        }
        guard queueBytes >= 1024 else { throw ValidationError("--queue-bytes must be at least 1024") }
        guard maxConnections >= 1 else { throw ValidationError("--max-connections must be at least 1") }
        guard compressionThreshold >= 0 else { throw ValidationError("--compression-threshold must not be negative") }
        guard (9...15).contains(compressionWindowBits) else {
            throw ValidationError("--compression-window-bits must be 9 to 15 (zlib's windows); got \(compressionWindowBits)")
        }
        do {
            _ = try storeConfiguration
        } catch {
            throw ValidationError("--store: \(error)")
        }
        if tlsSelfSigned, tlsCert != nil || tlsKey != nil { throw ValidationError("--tls-self-signed and --tls-cert/--tls-key exclude each other") }
        if (tlsCert == nil) != (tlsKey == nil) { throw ValidationError("--tls-cert and --tls-key go together") }
        if tlsFaults, !tlsSelfSigned {
            throw ValidationError("--tls-faults needs --tls-self-signed: the faults' certificates are issued by the CA the server makes")
        }
        if tlsClientCa != nil, !tlsSelfSigned, tlsCert == nil {
            throw ValidationError("--tls-client-ca needs TLS: --tls-self-signed, or --tls-cert and --tls-key")
        }
        if tlsDirectory != nil, !tlsSelfSigned { throw ValidationError("--tls-directory goes with --tls-self-signed") }
        if let echoFaults {
            do {
                _ = try ScriptFile.faults(from: echoFaults)
            } catch {
                throw Self.refused("--echo-faults: \(error)")
            }
        }
        if script != nil {
            do {
                var configuration = DuplexServerConfiguration()
                configuration.routes = try scriptedRoutes()
                try DuplexServer(configuration: configuration).validateRoutes()
            } catch {
                throw Self.refused("--script: \(error)")
            }
        }
        if let replay { _ = try Self.cassette(replay) }
        guard (1...10_000).contains(http2MaxStreams) else { throw ValidationError("--http2-max-streams must be from 1 to 10000") }
        if let echoSubprotocols, Self.list(echoSubprotocols).isEmpty {
            throw ValidationError("--echo-subprotocols needs at least one name")
        }
        for (name, value) in [
            ("--store-startup-timeout", storeStartupTimeout), ("--store-lease", storeLease), ("--store-query-timeout", storeQueryTimeout),
            ("--request-head-timeout", requestHeadTimeout),
            ("--idle-timeout", idleTimeout),
            ("--shutdown-timeout", shutdownTimeout),
        ] {
            guard value > 0, value <= 86_400 else { throw ValidationError("\(name) must be from 0 to 86400 seconds") }
        }
    }

    /// A file the flag names that cannot be used: its error alone, without the usage text that
    /// a ``ValidationError`` brings (the place in the file is what helps), and exit status 64 all
    /// the same.
    static func refused(_ message: String) -> ExitCode {
        FileHandle.standardError.write(Data("Error: \(message)\n".utf8))
        return .validationFailure
    }

    /// The cassette of `--replay`.
    static func cassette(_ path: String) throws -> Cassette {
        do {
            return try Cassette.load(path: path)
        } catch {
            throw ValidationError("--replay: \(error)")
        }
    }

    /// The routes of `--script`; none without it.
    func scriptedRoutes() throws(ScriptError) -> [ScriptedRoute] {
        guard let script else { return [] }
        return try ScriptFile.load(path: script)
    }

    /// The room store the options (or `DUPLEX_STORE`) name.
    var storeConfiguration: ChatStoreConfiguration {
        get throws {
            guard let text = store ?? ProcessInfo.processInfo.environment["DUPLEX_STORE"], !text.isEmpty else { return .memory }
            return try ChatStoreConfiguration(parsing: text)
        }
    }

    /// The configuration the options describe.
    var serverConfiguration: DuplexServerConfiguration {
        var configuration = DuplexServerConfiguration(
            host: host,
            port: port,
            historyLimit: history,
            maxMessageBytes: maxMessageBytes,
            maxRooms: maxRooms,
            shutdownTimeout: Self.duration(shutdownTimeout),
            chaos: chaos,
            requestHeadTimeout: Self.duration(requestHeadTimeout),
            idleTimeout: Self.duration(idleTimeout),
            maxConnections: maxConnections,
            historyBytesLimit: historyBytes,
            totalHistoryBytesLimit: totalHistoryBytes,
            outboundQueueBytes: queueBytes,
            echoSubprotocols: echoSubprotocols.map(Self.list),
            compression: noCompression
                ? nil
                : PerMessageDeflate(
                    minimumBytes: compressionThreshold, maxWindowBits: compressionWindowBits, peerMaxWindowBits: compressionWindowBits)
        )
        configuration.echoFaults = echoFaults.flatMap { try? ScriptFile.faults(from: $0) } ?? WebSocketFaults()
        configuration.http2.enabled = !noHttp2
        configuration.http2.maxConcurrentStreams = http2MaxStreams
        switch (try? storeConfiguration)?.postgres {
        case var postgres?:
            postgres.startupTimeout = Self.duration(storeStartupTimeout)
            postgres.lease = Self.duration(storeLease)
            postgres.queryTimeout = Self.duration(storeQueryTimeout)
            // Renewed several times per lease, at most every second.
            postgres.heartbeatInterval = min(.seconds(1), Self.duration(storeLease / 4))
            configuration.store = .postgres(postgres)
        default:
            configuration.store = .memory
        }
        return configuration
    }

    private static func list(_ text: String) -> [String] {
        text.split(separator: ",").map { String($0.filter { $0 != " " }) }.filter { !$0.isEmpty }
    }

    private static func duration(_ seconds: Double) -> Duration {
        .milliseconds(Int64((seconds * 1000).rounded()))
    }

    /// The TLS settings the options ask for, and where the made CA was written; nil without TLS.
    /// Files are read and written here, so a bad path fails at start with its name.
    func tlsSettings() throws -> (tls: DuplexServerTLS, caFile: String?)? {
        var made: (DuplexServerTLS, String?)
        if tlsSelfSigned {
            var hosts = DuplexServerTLS.defaultHosts
            if !hosts.contains(host), !["0.0.0.0", "::"].contains(host) { hosts.append(host) }
            let tls = try DuplexServerTLS.selfSigned(hosts: hosts)
            let directory =
                tlsDirectory
                ?? FileManager.default.temporaryDirectory.appendingPathComponent("duplex-server-\(ProcessInfo.processInfo.processIdentifier)").path
            // The client key is a secret of sorts: the folder is the user's alone.
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let caFile = (directory as NSString).appendingPathComponent("ca.pem")
            try Data((tls.certificateAuthorityPEM ?? "").utf8).write(to: URL(fileURLWithPath: caFile))
            if let authority = tls.certificateAuthority {
                let client = try authority.issue(commonName: "duplex client", hosts: [], usage: .client)
                try Data(client.chainPEM.utf8).write(to: URL(fileURLWithPath: (directory as NSString).appendingPathComponent("client.pem")))
                try Data(client.privateKeyPEM.utf8).write(to: URL(fileURLWithPath: (directory as NSString).appendingPathComponent("client-key.pem")))
            }
            made = (tls, caFile)
        } else if let tlsCert, let tlsKey {
            made = (try DuplexServerTLS(certificateChainFile: tlsCert, privateKeyFile: tlsKey), nil)
        } else {
            return nil
        }
        if let tlsClientCa {
            do {
                made.0.clientCertificateAuthorityPEM = try String(contentsOfFile: tlsClientCa, encoding: .utf8)
            } catch {
                throw DuplexServerError.invalidTLSConfiguration("cannot read the client CA file \(tlsClientCa): \(error.localizedDescription)")
            }
        }
        made.0.faults = tlsFaults
        return made
    }

    func run() async throws {
        let level = Logger.Level(rawValue: logLevel) ?? .info
        let json = logFormat == "json"
        LoggingSystem.bootstrap { label in
            if json { return JSONLogHandler(label: label, logLevel: level) }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "duplex-server")
        // Read when the shared event-loop group is first made, which the server does on start.
        NIOSingletons.groupLoopCountSuggestion = eventLoops ?? UsableCPUs.count()
        var configuration = serverConfiguration
        configuration.routes = try scriptedRoutes()
        // Read again here, as --script is: a file that changed since validate() fails the start
        // with its reason instead of serving without the cassette.
        if let replay {
            configuration.replay = ReplayConfiguration(cassette: try Self.cassette(replay))
            configuration.replay?.builtInRoutes = true
        }
        let tls = try tlsSettings()
        configuration.tls = tls?.tls
        let server = DuplexServer(
            configuration: configuration,
            logger: logger
        )
        let scheme = tls == nil ? "http" : "https"
        let caNote = tls?.caFile.map { " (CA: \($0))" } ?? ""
        let group = ServiceGroup(
            configuration: .init(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger)
        )
        let host = self.host
        let routes = configuration.routes.map(\.description).joined(separator: ", ")
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            tasks.addTask {
                let port = try await server.port()
                let shown = host.contains(":") ? "[\(host)]" : host
                FileHandle.standardOutput.write(Data("duplex-server listening on \(scheme)://\(shown):\(port)\(caNote)\n".utf8))
                if !routes.isEmpty {
                    FileHandle.standardOutput.write(Data("scripted routes: \(routes); journal at GET /_journal\n".utf8))
                }
            }
            try await tasks.waitForAll()
        }
    }
}
