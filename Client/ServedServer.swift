import DuplexRecordReplay
import Logging
import ServiceLifecycle
import UnixSignals

/// Runs `server` until SIGINT or SIGTERM, then shuts it down gracefully; `ready` gets the port
/// it listens on once it does (the commands print their line there).
/// - Throws: ``Failure`` (unreachable) when it cannot listen on `listen`.
func serveUntilSignalled(_ server: CassetteServer, listen: String, logger: Logger, ready: (Int) -> Void) async throws {
    let group = ServiceGroup(configuration: .init(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        let port: Int
        do {
            port = try await server.port()
        } catch {
            await group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
            throw Failure(.unreachable, "cannot listen on \(listen): \(error)")
        }
        ready(port)
        try await tasks.waitForAll()
    }
}
