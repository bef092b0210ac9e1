import DuplexHost
package import DuplexScripted
import Hummingbird
package import Logging
import ServiceLifecycle

/// A server that only records, only replays or only proxies, on the host with no chat server:
/// what `duplex record`, `duplex replay` and `duplex intercept` run. (`DuplexServer` serves the same route sets beside
/// its own.) Besides the recorded paths it answers `GET /health` (`{"status":"ok"}`), and, when
/// replaying with `chaos`, the `/_chaos/` routes; a recording server forwards every other
/// path, `/_chaos/` included.
package final class CassetteServer: Service, Sendable {
    /// What it serves.
    package enum Mode: Sendable {
        /// Forwards every session to an upstream and records it.
        case record(RecordConfiguration)
        /// Serves a cassette's server side.
        case replay(ReplayConfiguration)
        /// Serves proxy routes (and any scripted ones), journaled in `journal`, which
        /// `GET /_journal` answers.
        case proxy([ScriptedRoute], journal: ScriptJournal)
    }

    let host: HostServer
    private let table: RouteTable

    /// A server listening at `address` and `port` (0: the OS picks); nothing listens until
    /// ``run()``.
    package init(address: String, port: Int, mode: Mode, chaos: Bool = false, logger: Logger) {
        var configuration = HostServer.Configuration()
        configuration.host = address
        configuration.port = port
        let host = HostServer(configuration: configuration, metrics: ServerMetrics(), logger: logger)
        self.host = host
        var table = RouteTable()
        table.add([.get("/health") { _, _ in Response.json(status: .ok, #"{"status":"ok"}"#) }])
        switch mode {
        case .record(let record):
            table.add(host.recordRoutes(record))
        case .replay(let replay):
            table.add(host.replayRoutes(ReplayBook(replay)))
            table.add(host.chaosRoutes(enabled: chaos))
        case .proxy(let routes, let journal):
            table.add(host.journalRoutes(journal))
            table.add(host.scriptedRoutes(routes, journal: journal))
        }
        self.table = table
    }

    /// Listens and serves until cancelled or gracefully shut down.
    package func run() async throws {
        let table = self.table
        do {
            try await host.serve(listeners: [HostServer.Listener()], routes: { table })
        } catch {
            host.failed(error)
            throw error
        }
    }

    /// The port it listens on, once it does.
    /// - Throws: the error it failed to listen with.
    package func port() async throws -> Int {
        try await host.port()
    }
}
