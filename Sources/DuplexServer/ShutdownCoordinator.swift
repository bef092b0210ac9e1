import DuplexHost
import DuplexSchema
import Logging
import ServiceLifecycle

/// Closes every connection with 1001 (and sends every HTTP/2 connection GOAWAY) and waits for
/// them, when a graceful shutdown begins; past the shutdown timeout, the server closes what is
/// left hard.
struct ShutdownCoordinator: Service {
    let server: DuplexServer

    func run() async throws {
        // Returns when a graceful shutdown begins; throws when the task is cancelled instead.
        try await gracefulShutdown()
        server.refusal.setStopping(true)
        server.logger.info("shutting down", metadata: ["connections": "\(server.connections.count)"])
        server.startShutdownDeadline(server.configuration.shutdownTimeout)
        // HTTP/2 clients open no new stream here; each connection closes once its streams end.
        server.http2Connections.goAway()
        await server.connections.shutdown(
            code: .goingAway,
            reason: "server shutting down",
            timeout: server.configuration.shutdownTimeout
        )
    }
}
