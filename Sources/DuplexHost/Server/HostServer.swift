package import DuplexSchema
package import DuplexWire
package import HTTPTypes
package import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
package import Logging
import NIOConcurrencyHelpers
package import NIOCore
package import NIOSSL
import ServiceLifecycle
package import Tracing
import Instrumentation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A server's life on the host: it listens (one listener, or several: the TLS faults), serves
/// one ``RouteTable`` on every listener, restarts on request, and shuts down gracefully
/// (every WebSocket closed with 1001, every SSE stream ended, HTTP/2 connections sent GOAWAY,
/// what is left closed hard at the deadline). It knows nothing of what the routes do: the
/// loopback server (`DuplexServer`) and the `duplex` CLI's record and replay servers each run
/// one with routes of their own.
package final class HostServer: Sendable {
    /// What the host keeps to, as plain values.
    package struct Configuration: Sendable {
        package var host = "127.0.0.1"
        /// 0: the OS picks.
        package var port = 0
        /// `http` or `https`, as the server logs its address.
        package var scheme = "http"
        /// How long an HTTP/1.1 connection may sit idle between requests.
        package var idleTimeout: Duration = .seconds(60)
        package var maxMessageBytes = 16 * 1024 * 1024
        package var closeTimeout: Duration = .seconds(5)
        package var limits = ConnectionGuard.Limits(
            requestHeadTimeout: .seconds(10), maxRequestLineBytes: 8 * 1024, maxRequestHeadBytes: 32 * 1024, maxHeaderFields: 100)
        package var maxConnections = 10_000
        /// permessage-deflate as offered to clients; nil: none.
        package var compression: PerMessageDeflate? = PerMessageDeflate(maxWindowBits: 12, peerMaxWindowBits: 12)
        /// HTTP/2's limits on the TLS listener (not the fault listeners); nil: HTTP/1.1 only.
        package var http2: HTTP2Limits? = HTTP2Limits()
        package var outboundQueue = (count: 4096, bytes: 1024 * 1024)
        package var heartbeatInterval: Duration = .seconds(15)
        package var sseRetryMilliseconds = 2000
        package var shutdownTimeout: Duration = .seconds(10)
        /// Whether a restart holds the port while the server is down.
        package var holdsPortWhileRestarting = true
        /// The route whose counters the bounded writers' drains add to.
        package var writersRoute = "ws"
        /// The tracer connections report spans to; nil: the bootstrapped one, if any.
        package var tracer: (any Tracer)?

        /// The defaults, the loopback server's (`DuplexServerConfiguration`'s).
        package init() {}
    }

    /// A listening socket: the server's own (`name` nil), or another (a TLS fault's), each with
    /// its TLS context (nil for plain TCP).
    package struct Listener: Sendable {
        package var name: String?
        package var tls: NIOSSLContext?

        package init(name: String? = nil, tls: NIOSSLContext? = nil) {
            self.name = name
            self.tls = tls
        }
    }

    /// Thrown to ``port()``'s callers when the server stopped before it listened, with no
    /// error of its own.
    package struct StoppedBeforeListening: Error {}

    package let configuration: Configuration
    package let logger: Logger
    /// What the server counts.
    package let metrics: ServerMetrics
    /// The open WebSockets and SSE streams.
    package let connections: ConnectionRegistry
    /// Per event loop: the bounded writers with frames to write, and the zlib streams the
    /// connections that compress share.
    package let writerDrains: WriterDrains
    /// Whether the server refuses requests (a chaos fault) or is stopping.
    package let refusal = RefusalGate()
    /// Every accepted connection, within the connection limit.
    package let channels: ChannelTracker
    /// The open HTTP/2 connections, for GOAWAY.
    package let http2Connections = HTTP2ConnectionSet()
    private let lifecycle = NIOLockedValueBox(Lifecycle())
    private let restartRequest = NIOLockedValueBox<AsyncStream<Restart>.Continuation?>(nil)
    /// The names of the WebSocket and stream routes of the table served now
    /// (``RouteTable/connectionRouteNames``): what a fault's `route=` scope may name.
    package var routeNames: [String] { servedRouteNames.withLockedValue { $0 } }
    private let servedRouteNames = NIOLockedValueBox<[String]>([])
    /// Closes every connection still open when a graceful shutdown passes its deadline.
    private let shutdownDeadline = NIOLockedValueBox<Task<Void, Never>?>(nil)

    /// A restart asked for: how long the server stays down, and whether its owner forgets what
    /// it holds (chat rooms).
    private struct Restart: Sendable {
        var downtime: Duration
        var amnesia: Bool
    }

    private struct Lifecycle: DeferringWork {
        var port: Int?
        var failure: (any Error)?
        var waiters = Waiters<Int>()
        var afterUnlock: [@Sendable () -> Void] = []
        /// The port held through a restart, until the server listens again.
        var reservation: PortReservation?
        /// Where each named listener listens; kept through restarts.
        var listenerPorts: [String: Int] = [:]
    }

    /// A host that counts in `metrics`; nothing listens until ``serve(listeners:routes:onRestart:)``.
    package init(configuration: Configuration, metrics: ServerMetrics, logger: Logger) {
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
        self.connections = ConnectionRegistry(metrics: metrics, logger: logger)
        self.writerDrains = WriterDrains(metrics: metrics.route(configuration.writersRoute))
        self.channels = ChannelTracker(limit: configuration.maxConnections)
    }

    /// The tracer connections report spans to: the configuration's, or the bootstrapped
    /// `InstrumentationSystem`'s; nil when neither is set (nothing is made per connection).
    package var activeTracer: (any Tracer)? {
        if let tracer = configuration.tracer { return tracer }
        let global = InstrumentationSystem.tracer
        return global is NoOpTracer ? nil : global
    }

    // MARK: Serving

    /// Listens on `listeners` and serves the table `routes` makes (again after each restart)
    /// until cancelled or gracefully shut down. `onRestart` runs while the server is down, with
    /// whether the restart asked to forget.
    package func serve(
        listeners: [Listener], routes: @escaping @Sendable () -> RouteTable, onRestart: @escaping @Sendable (_ amnesia: Bool) -> Void = { _ in }
    ) async throws {
        var port = configuration.port
        do {
            var rebindAttempts = 0
            while true {
                let next: Restart?
                do {
                    next = try await serveUntilRestart(port: port, listeners: listeners, table: routes())
                } catch  where rebindAttempts < Self.maxRebindAttempts && Self.isAddressInUse(error) && lifecycle.withLockedValue({ $0.port }) != nil
                {
                    // After a restart the port may be taken for a while: on a port from the
                    // ephemeral range, an outgoing connection can get it as its local port while
                    // the server is down. Try again until it is free (up to 30 s).
                    rebindAttempts += 1
                    if rebindAttempts == 1 { logger.warning("port in use after a restart: trying again every 100 ms", metadata: ["port": "\(port)"]) }
                    try await Task.sleep(for: .milliseconds(100))
                    continue
                }
                guard let restart = next else { break }
                rebindAttempts = 0
                // A restart: every connection was told 1001. One the old listener accepted as it
                // stopped may still be open, unserved: close it, as a process that exits would.
                channels.closeAll()
                port = lifecycle.withLockedValue { $0.port } ?? port
                connections.reopen()
                refusal.setStopping(false)
                onRestart(restart.amnesia)
                // Hold the port while down, so that no outgoing connection takes it meanwhile.
                let reservation = configuration.holdsPortWhileRestarting ? PortReservation(host: configuration.host, port: port) : nil
                logger.notice("restarting", metadata: ["down for": "\(restart.downtime)", "port": "\(port)", "amnesia": "\(restart.amnesia)"])
                try await Task.sleep(for: restart.downtime)
                if PortReservation.holdsUntilListening {
                    // Released once the server listens again (didStart), or when it stops.
                    lifecycle.withLockedValue { $0.reservation = reservation }
                } else {
                    reservation?.release()
                }
            }
            channels.closeAll()
            didStop(error: nil)
        } catch {
            didStop(error: error)
            throw error
        }
    }

    /// How many times a restart tries to listen again on a port in use (every 100 ms).
    static let maxRebindAttempts = 300

    /// Whether `error` is the listener's EADDRINUSE, however the server stack wrapped it.
    package static func isAddressInUse(_ error: any Error) -> Bool {
        if let error = error as? IOError, error.errnoCode == EADDRINUSE { return true }
        let text = String(describing: error)
        return text.contains("Address already in use") || text.contains("EADDRINUSE")
    }

    /// Stops listening, closing every connection with 1001 as a graceful shutdown does, and
    /// listens again on the same port after `downtime`.
    package func restart(downFor downtime: Duration, amnesia: Bool) {
        let request = restartRequest.withLockedValue { $0 }
        request?.yield(Restart(downtime: downtime, amnesia: amnesia))
    }

    /// Serves on `port` until a graceful shutdown (returns nil) or a restart (returns it).
    private func serveUntilRestart(port: Int, listeners: [Listener], table: RouteTable) async throws -> Restart? {
        // The table says which routes there are: their series show at zero before any
        // connection, and a fault may be scoped to one of them.
        let names = table.connectionRouteNames
        metrics.declare(routes: names)
        servedRouteNames.withLockedValue { $0 = names }
        let group = makeServiceGroup(port: port, listeners: listeners, table: table)
        let (restarts, request) = AsyncStream<Restart>.makeStream()
        restartRequest.withLockedValue { $0 = request }
        defer { restartRequest.withLockedValue { $0 = nil } }
        return try await withThrowingTaskGroup(of: Restart?.self) { tasks in
            tasks.addTask {
                try await group.run()
                return nil
            }
            tasks.addTask {
                for await restart in restarts {
                    await group.triggerGracefulShutdown()
                    return restart
                }
                return nil
            }
            let first = try await tasks.next() ?? nil
            if first != nil {
                _ = try await tasks.next()  // the group finishing its shutdown
            }
            request.finish()
            tasks.cancelAll()
            shutdownDeadline.withLockedValue { $0 }?.cancel()
            return first
        }
    }

    private func makeServiceGroup(port: Int, listeners: [Listener], table: RouteTable) -> ServiceGroup {
        let channelConfiguration = HTTP1WebSocketUpgradeChannel.Configuration(
            http1: .init(idleTimeout: TimeAmount(configuration.idleTimeout)),
            ws: .init(
                maxFrameSize: configuration.maxMessageBytes,
                // permessage-deflate is negotiated by DuplexChildChannel (DuplexWire), not here.
                extensions: [],
                autoPing: .disabled,
                closeTimeout: configuration.closeTimeout,
                validateUTF8: true
            )
        )
        refusal.exempting(table.servesWhileRefusing)
        let router = table.router(middleware: RequestTracingMiddleware { [weak self] in self?.activeTracer })
        let streams = EventStreamServing(
            route: table.stream(for:),
            registry: connections,
            metrics: metrics,
            maxBodyBytes: configuration.maxMessageBytes,
            queueLimit: configuration.outboundQueue,
            heartbeatInterval: configuration.heartbeatInterval,
            retryMilliseconds: configuration.sseRetryMilliseconds
        )
        // The server counts as listening once every listener does.
        let startup = NIOLockedValueBox((waiting: listeners.count, port: port))
        let applications: [any Service] = listeners.map { listener in
            let name = listener.name
            let listenerPort = name.flatMap { name in lifecycle.withLockedValue { $0.listenerPorts[name] } } ?? (name == nil ? port : 0)
            let http2 = listener.tls != nil && name == nil ? configuration.http2 : nil
            return Application(
                router: router,
                server: HTTPServerBuilder { responder in
                    GuardedChildChannel(
                        base: DuplexChildChannel(
                            responder: responder,
                            configuration: channelConfiguration,
                            compression: self.configuration.compression,
                            secure: listener.tls != nil,
                            http2: http2.map {
                                .init(
                                    settings: $0,
                                    firstStreamTimeout: Duration(self.configuration.limits.requestHeadTimeout),
                                    refusal: self.refusal,
                                    metrics: self.metrics,
                                    connections: self.http2Connections
                                )
                            },
                            streams: streams,
                            route: table.webSocket(for:)
                        ),
                        limits: self.configuration.limits,
                        refusal: self.refusal,
                        metrics: self.metrics,
                        tracker: self.channels,
                        tls: listener.tls
                    )
                },
                configuration: .init(address: .hostname(configuration.host, port: listenerPort), serverName: "duplex-server"),
                onServerRunning: { [self] channel in
                    let bound = channel.localAddress?.port ?? listenerPort
                    if let name {
                        lifecycle.withLockedValue { $0.listenerPorts[name] = bound }
                    }
                    let all: Int? = startup.withLockedValue { state in
                        if name == nil { state.port = bound }
                        state.waiting -= 1
                        return state.waiting == 0 ? state.port : nil
                    }
                    if let all { self.didStart(port: all) }
                },
                logger: logger
            )
        }
        // Services stop in reverse order: the coordinator closes every connection with 1001
        // before the applications are told to stop.
        return ServiceGroup(
            configuration: .init(services: applications + [ShutdownCoordinator(host: self)], gracefulShutdownSignals: [], logger: logger)
        )
    }

    // MARK: Shutting down

    /// Starts the shutdown deadline: once `timeout` has passed, every connection still open is
    /// closed hard, so that no peer (one that never reads, say) can hold the shutdown off.
    func startShutdownDeadline(_ timeout: Duration) {
        // Ends at the deadline, or when the shutdown finished first and cancels it.
        let task = Task { [channels, logger] in
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            let cut = channels.closeAll()
            if cut > 0 {
                logger.warning("shutdown deadline passed: closed connections hard", metadata: ["connections": "\(cut)", "deadline": "\(timeout)"])
            }
        }
        shutdownDeadline.withLockedValue { $0 = task }
    }

    // MARK: Where it listens

    /// The port of each named listener, once the server listens.
    package var listenerPorts: [String: Int] {
        lifecycle.withLockedValue { $0.listenerPorts }
    }

    /// The port the server listens on, once it does.
    ///
    /// Waits until the server is listening. Cancel the calling task to stop waiting.
    /// - Throws: the error the server failed with, ``StoppedBeforeListening`` when it stopped
    ///   before it listened with none, or `CancellationError`.
    package func port() async throws -> Int {
        try await lifecycle.wait(in: \.waiters) { state in
            if let port = state.port { return .success(port) }
            if let failure = state.failure { return .failure(failure) }
            return nil
        }
    }

    /// Records that the server could not start (a check before it listened failed), for
    /// ``port()``'s callers.
    package func failed(_ error: any Error) {
        didStop(error: error)
    }

    private func didStart(port: Int) {
        lifecycle.withLockedValue { state in
            defer { state.reservation = nil }
            return state.reservation
        }?.release()
        logger.info("listening", metadata: ["host": "\(configuration.host)", "port": "\(port)", "scheme": "\(configuration.scheme)"])
        lifecycle.locked { state in
            guard state.port == nil else { return }  // back after a restart
            state.port = port
            state.resume(state.waiters.takeAll(), with: .success(port))
        }
    }

    private func didStop(error: (any Error)?) {
        lifecycle.withLockedValue { state in
            defer { state.reservation = nil }
            return state.reservation
        }?.release()
        let failure = error ?? StoppedBeforeListening()
        lifecycle.locked { state in
            if state.port == nil { state.failure = failure }
            state.resume(state.waiters.takeAll(), with: .failure(failure))
        }
    }

    // MARK: What routes share

    /// Serves `service` on `channel`'s event loop (``EventLoopWebSocketHandler``), with
    /// permessage-deflate as the handshake agreed it (`deflate`), logging with the client's
    /// `trace`.
    package func installEventLoopService(
        _ service: any EventLoopWebSocketService, on channel: any Channel, deflate: DeflateAgreement?, trace: ConnectionTrace?
    ) throws {
        let handler = EventLoopWebSocketHandler(
            configuration: .init(maxMessageBytes: configuration.maxMessageBytes, closeTimeout: configuration.closeTimeout),
            registry: connections,
            service: service,
            metrics: metrics,
            trace: trace,
            deflate: deflate.map { DeflateContext(agreement: $0, zlib: writerDrains.drains(for: channel.eventLoop).zlib) }
        )
        let pipeline = channel.pipeline.syncOperations
        // The handler reads and writes the bytes itself: NIO's decoder is taken out.
        try WebSocketPipeline.add(handler, to: pipeline)
        // The front door's work ends with the upgrade: the handler checks frames itself (masking
        // included), and every read and write of the connection then skips one handler.
        if let guardHandler = try? pipeline.handler(type: ConnectionGuard.self) {
            pipeline.removeHandler(guardHandler, promise: nil)
        }
    }

    /// The subprotocols a request offers in `Sec-WebSocket-Protocol`, in its order (every field,
    /// comma-separated values, blanks dropped).
    package static func offeredSubprotocols(_ request: Request) -> [String] {
        request.headers[values: .secWebSocketProtocol]
            .flatMap { $0.split(separator: ",") }
            .map { String($0.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed()) }
            .filter { !$0.isEmpty }
    }

    /// The response header that selects a subprotocol: with `preferring` nil, the client's
    /// first; else the first of `preferring` the client offered. None when nothing matches or
    /// nothing was offered (a browser then fails the connection, as RFC 6455 says it must only
    /// when the server picks one it did not offer).
    package static func selecting(from offered: [String], preferring: [String]?) -> HTTPFields {
        let chosen = preferring.map { list in list.first { offered.contains($0) } } ?? offered.first
        guard let chosen else { return [:] }
        return [.secWebSocketProtocol: chosen]
    }

    /// 426, for a WebSocket route asked without an upgrade, counted.
    package func upgradeRequired() -> Response {
        var response = Response.json(status: .upgradeRequired, #"{"error":"this route speaks WebSocket: send an Upgrade: websocket request"}"#)
        response.headers[.upgrade] = "websocket"
        return counted(response)
    }

    /// Counts a refusal (``ServerMetrics/refused(status:)``) and returns it.
    package func counted(_ refusal: Response) -> Response {
        metrics.refused(status: refusal.status.code)
        return refusal
    }
}

/// Closes every connection with 1001 (and sends every HTTP/2 connection GOAWAY) and waits for
/// them, when a graceful shutdown begins; past the shutdown timeout, the host closes what is
/// left hard.
struct ShutdownCoordinator: Service {
    let host: HostServer

    func run() async throws {
        // Returns when a graceful shutdown begins; throws when the task is cancelled instead.
        try await gracefulShutdown()
        host.refusal.setStopping(true)
        host.logger.info("shutting down", metadata: ["connections": "\(host.connections.count)"])
        host.startShutdownDeadline(host.configuration.shutdownTimeout)
        // HTTP/2 clients open no new stream here; each connection closes once its streams end.
        host.http2Connections.goAway()
        await host.connections.shutdown(code: .goingAway, reason: "server shutting down", timeout: host.configuration.shutdownTimeout)
    }
}
