public import DuplexServer
public import Foundation
public import Logging
import ServiceLifecycle

/// A running in-process Duplex server, as `withDuplexServer` hands it to its body.
public struct RunningDuplexServer: Sendable {
    /// The server.
    public let server: DuplexServer
    /// The host it listens on, as configured.
    public let host: String
    /// The port it listens on.
    public let port: Int

    /// What the server's scripted routes served and received (the server's `journal`).
    public var journal: ScriptJournal { server.journal }

    /// `ws://host:port/path`, or `wss://` when the server serves TLS.
    public func webSocketURL(_ path: String) -> URL {
        url(scheme: server.configuration.tls == nil ? "ws" : "wss", path)
    }

    /// `http://host:port/path`, or `https://` when the server serves TLS.
    public func httpURL(_ path: String) -> URL {
        url(scheme: server.configuration.tls == nil ? "http" : "https", path)
    }

    /// The URL of `path` on a TLS fault's listener (`DuplexServerTLS.faults`), `wss://` or
    /// `https://`; nil when the server has no such listener.
    public func url(for fault: TLSFault, _ path: String, webSocket: Bool) -> URL? {
        guard let port = server.tlsFaultPorts[fault] else { return nil }
        return url(scheme: webSocket ? "wss" : "https", path, port: port)
    }

    private func url(scheme: String, _ path: String, port: Int? = nil) -> URL {
        let port = port ?? self.port
        let host = self.host.contains(":") ? "[\(self.host)]" : self.host
        let path = path.hasPrefix("/") ? path : "/" + path
        // The host is an IP literal or a name and the path is the caller's: both are valid in a URL.
        return URL(string: "\(scheme)://\(host):\(port)\(path)")!
    }
}

/// Runs a Duplex server in-process on a free loopback port for the duration of `body`, then shuts
/// it down gracefully, whether `body` returns or throws.
///
/// ```swift
/// try await withDuplexServer { server in
///     let url = server.webSocketURL("/echo")
///     // drive a client against url
/// }
/// ```
///
/// With `routes`, the server also serves routes of your own protocol, and journals what they
/// serve and receive (``RunningDuplexServer/journal``):
///
/// ```swift
/// let feed = ScriptedRoute.webSocket("/feed", script: WebSocketScript(onConnect: [.send("hello")]))
/// try await withDuplexServer(routes: [feed]) { server in
///     // drive a client against server.webSocketURL("/feed")
///     let sent = try await server.journal.first(within: .seconds(5)) { $0.kind == .text && $0.direction == .in }
/// }
/// ```
/// - Parameters:
///   - configuration: the server's configuration; its port is replaced by 0 unless `keepPort`.
///   - routes: scripted routes served besides the configuration's own.
///   - keepPort: listen on the configured port instead of a free one.
///   - logger: the server's logger; by default one that logs nothing below `.critical`.
///   - body: the code to run while the server listens.
/// - Returns: what `body` returns.
public func withDuplexServer<Result: Sendable>(
    configuration: DuplexServerConfiguration = .init(),
    routes: [ScriptedRoute] = [],
    keepPort: Bool = false,
    logger: Logger? = nil,
    _ body: (RunningDuplexServer) async throws -> Result
) async throws -> Result {
    var configuration = configuration
    configuration.routes += routes
    if !keepPort { configuration.port = 0 }
    let logger =
        logger
        ?? {
            var logger = Logger(label: "duplex-server-test")
            logger.logLevel = .critical
            return logger
        }()
    let server = DuplexServer(configuration: configuration, logger: logger)
    let group = ServiceGroup(configuration: .init(services: [server], gracefulShutdownSignals: [], logger: logger))
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        do {
            let port = try await server.port()
            let result = try await body(RunningDuplexServer(server: server, host: configuration.host, port: port))
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return result
        } catch {
            await group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
            throw error
        }
    }
}
