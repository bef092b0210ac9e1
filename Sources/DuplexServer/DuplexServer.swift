import DuplexHost
public import Logging
public import ServiceLifecycle
import DuplexSchema
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import NIOConcurrencyHelpers
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import NIOSSL
import Instrumentation
import Tracing

/// The Duplex loopback server: WebSocket echo, chat rooms and Server-Sent Events, for testing
/// real-time clients against.
///
/// It is a swift-service-lifecycle `Service`: run it in a `ServiceGroup`, or call ``run()`` in a
/// task and cancel it, or use `withDuplexServer` from `DuplexTesting`. A graceful shutdown first
/// closes every WebSocket with 1001 (Going Away) and ends every SSE stream, then stops listening.
///
/// ```swift
/// let server = DuplexServer(configuration: .init(port: 0))
/// let group = ServiceGroup(services: [server], gracefulShutdownSignals: [.sigterm], logger: logger)
/// async let running: Void = group.run()
/// let port = try await server.port()   // the port the OS picked
/// ```
///
/// Routes:
/// - `GET /health`: `{"status":"ok","store":{…},"http2":{…}}`, the store's kind and state, and
///   the HTTP/2 connections, streams and WebSockets open.
/// - `GET /metrics`: connections, messages and bytes by route, close codes sent, refusals,
///   faults injected and the process' memory, in Prometheus' text exposition format.
/// - `WS /echo`: every message back, same opcode, in order.
/// - `WS /chat/{room}?name=NAME[&since=SEQ&epoch=E][&token=T]`: chat rooms (see `docs/protocol.md`).
/// - `GET /events[?interval=MS]`: an SSE tick stream that resumes from `Last-Event-ID`.
/// - `GET /chat/{room}/events`: a room's events as SSE, resuming from `Last-Event-ID`.
public final class DuplexServer: Service, Sendable {
    /// The configuration the server was created with.
    public let configuration: DuplexServerConfiguration
    let logger: Logger
    /// What the server counts, for `GET /metrics`.
    let metrics: ServerMetrics
    /// What the chat rooms count, in the same registry.
    let chatMetrics: ChatMetrics
    /// `GET /metrics/live`'s subscribers, and their timers.
    let liveMetrics: LiveMetricsFeed
    let connections: ConnectionRegistry
    /// Per event loop: the chat members' writers with frames to write, and the zlib streams
    /// the connections that compress share.
    let writerDrains: WriterDrains
    /// Where the chat rooms live: memory, or PostgreSQL (``DuplexServerConfiguration/store``).
    let rooms: any ChatStore
    let ticks = TickClock()
    let refusal = RefusalGate()
    let channels: ChannelTracker
    /// The open HTTP/2 connections, for GOAWAY.
    let http2Connections = HTTP2ConnectionSet()
    /// The sessions replayed, when the server replays a cassette.
    let replayBook: ReplayBook?
    /// What the scripted routes (``DuplexServerConfiguration/routes``) served and received, to
    /// assert on.
    public let journal = ScriptJournal()
    /// Closes every connection still open when a graceful shutdown passes its deadline.
    private let shutdownDeadline = NIOLockedValueBox<Task<Void, Never>?>(nil)
    private let lifecycle = NIOLockedValueBox(Lifecycle())
    private let restartRequest = NIOLockedValueBox<AsyncStream<Restart>.Continuation?>(nil)

    /// A restart asked for: how long the server stays down, and whether it forgets its rooms.
    private struct Restart: Sendable {
        var downtime: Duration
        var amnesia: Bool
    }

    /// Creates a server; nothing listens until ``run()``.
    /// - Parameters:
    ///   - configuration: addresses, limits and intervals.
    ///   - logger: where the server logs; by default a logger labelled `duplex-server`.
    public init(configuration: DuplexServerConfiguration = .init(), logger: Logger = Logger(label: "duplex-server")) {
        self.configuration = configuration
        self.logger = logger
        let metrics = ServerMetrics(transport: configuration.tls == nil ? "tcp" : "tls")
        self.metrics = metrics
        let chatMetrics = ChatMetrics(factory: metrics.factory)
        self.chatMetrics = chatMetrics
        let chaos = configuration.chaos
        self.liveMetrics = LiveMetricsFeed { metrics.liveJSON(chaos: chaos) }
        let context = ChatStoreConfiguration.Context(
            historyLimit: configuration.historyLimit,
            historyBytesLimit: configuration.historyBytesLimit,
            totalHistoryBytesLimit: configuration.totalHistoryBytesLimit,
            maxRooms: configuration.maxRooms,
            logger: logger,
            metrics: chatMetrics.store
        )
        self.rooms =
            configuration.store.make?(context)
            ?? ChatRooms(
                historyLimit: configuration.historyLimit,
                maxRooms: configuration.maxRooms,
                historyBytesLimit: configuration.historyBytesLimit,
                totalHistoryBytesLimit: configuration.totalHistoryBytesLimit
            )
        self.channels = ChannelTracker(limit: configuration.maxConnections)
        self.replayBook = configuration.replay.map(ReplayBook.init)
        self.connections = ConnectionRegistry(metrics: metrics, logger: logger)
        self.writerDrains = WriterDrains(metrics: metrics.route("chat"))
        chatMetrics.readRooms(of: rooms, at: metrics)
    }

    /// Listens and serves until cancelled or gracefully shut down.
    /// - Throws: when the server cannot start, for example because the port is in use, the
    ///   PostgreSQL room store cannot be reached, or a scripted route clashes with a built-in one
    ///   (``DuplexServerError/invalidRoutes(_:)``).
    public func run() async throws {
        let rooms = self.rooms
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await rooms.run() }
            do {
                try validateRoutes()
                try await rooms.prepare()
                try await serve()
            } catch {
                didStop(error: error)
                group.cancelAll()
                throw error
            }
            group.cancelAll()
        }
    }

    private func serve() async throws {
        var port = configuration.port
        do {
            let listeners = try makeListeners()
            var rebindAttempts = 0
            while true {
                let next: Restart?
                do {
                    next = try await serveUntilRestart(port: port, listeners: listeners)
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
                if restart.amnesia { rooms.forgetAll() }
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
    static func isAddressInUse(_ error: any Error) -> Bool {
        if let error = error as? IOError, error.errnoCode == EADDRINUSE { return true }
        let text = String(describing: error)
        return text.contains("Address already in use") || text.contains("EADDRINUSE")
    }

    /// Stops listening, closing every connection with 1001 as a graceful shutdown does, and
    /// listens again on the same port after `downtime`.
    ///
    /// With `amnesia`, the server also forgets every chat room, as a new process would: rooms
    /// come back empty, with new epochs, so clients that resume see their history reset.
    public func restart(downFor downtime: Duration, amnesia: Bool = false) {
        let request = restartRequest.withLockedValue { $0 }
        request?.yield(Restart(downtime: downtime, amnesia: amnesia))
    }

    /// Serves on `port` until a graceful shutdown (returns nil) or a restart (returns it).
    private func serveUntilRestart(port: Int, listeners: [Listener]) async throws -> Restart? {
        let group = makeServiceGroup(port: port, listeners: listeners)
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

    /// A listening socket: the server's own, or a TLS fault's, each with its TLS context (nil
    /// for plain TCP).
    struct Listener: Sendable {
        var fault: TLSFault?
        var tls: NIOSSLContext?
    }

    /// The listeners the configuration asks for, their TLS contexts made once (certificates
    /// keep through restarts).
    /// - Throws: ``DuplexServerError/invalidTLSConfiguration(_:)``, for the certificates or for
    ///   HTTP/2 limits out of range.
    func makeListeners() throws -> [Listener] {
        guard let tls = configuration.tls else { return [Listener(fault: nil, tls: nil)] }
        var serverTLS = try tls.serverConfiguration()
        if configuration.http2.enabled {
            try configuration.http2.validate()
            serverTLS.applicationProtocols = ["h2", "http/1.1"]
        }
        var listeners = [Listener(fault: nil, tls: try Self.context(serverTLS))]
        if tls.faults {
            guard let authority = tls.certificateAuthority else {
                throw DuplexServerError.invalidTLSConfiguration(
                    "the TLS faults are issued by the server's own CA: make the certificate with selfSigned (--tls-self-signed)")
            }
            var hosts = DuplexServerTLS.defaultHosts
            if !hosts.contains(configuration.host), !["0.0.0.0", "::"].contains(configuration.host) { hosts.append(configuration.host) }
            for fault in TLSFault.allCases {
                listeners.append(Listener(fault: fault, tls: try Self.context(fault.serverConfiguration(authority: authority, hosts: hosts))))
            }
        }
        return listeners
    }

    private static func context(_ configuration: TLSConfiguration) throws -> NIOSSLContext {
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw DuplexServerError.invalidTLSConfiguration("the certificate and key cannot be used together: \(error)")
        }
    }

    private func makeServiceGroup(port: Int, listeners: [Listener]) -> ServiceGroup {
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
        let guardLimits = ConnectionGuard.Limits(
            requestHeadTimeout: TimeAmount(configuration.requestHeadTimeout),
            maxRequestLineBytes: configuration.maxRequestLineBytes,
            maxRequestHeadBytes: configuration.maxRequestHeadBytes,
            maxHeaderFields: configuration.maxHeaderFields
        )
        let table = makeRouteTable()
        refusal.exempting(table.servesWhileRefusing)
        let router = table.router(middleware: RequestTracingMiddleware { [weak self] in self?.activeTracer })
        let streams = EventStreamServing(
            route: table.stream(for:),
            registry: connections,
            metrics: metrics,
            maxBodyBytes: configuration.maxMessageBytes,
            queueLimit: (configuration.outboundQueueLimit, configuration.outboundQueueBytes),
            heartbeatInterval: configuration.heartbeatInterval,
            retryMilliseconds: configuration.sseRetryMilliseconds
        )
        // The server counts as listening once every listener does.
        let startup = NIOLockedValueBox((waiting: listeners.count, port: port))
        let applications: [any Service] = listeners.map { listener in
            let fault = listener.fault
            let listenerPort = fault.flatMap { fault in lifecycle.withLockedValue { $0.faultPorts[fault] } } ?? (fault == nil ? port : 0)
            return Application(
                router: router,
                server: HTTPServerBuilder { responder in
                    GuardedChildChannel(
                        base: DuplexChildChannel(
                            responder: responder,
                            configuration: channelConfiguration,
                            compression: self.configuration.compression,
                            secure: listener.tls != nil,
                            http2: listener.tls != nil && fault == nil && self.configuration.http2.enabled
                                ? .init(
                                    settings: self.configuration.http2.limits,
                                    firstStreamTimeout: self.configuration.requestHeadTimeout,
                                    refusal: self.refusal,
                                    metrics: self.metrics,
                                    connections: self.http2Connections
                                )
                                : nil,
                            streams: streams,
                            route: table.webSocket(for:)
                        ),
                        limits: guardLimits,
                        refusal: self.refusal,
                        metrics: self.metrics,
                        tracker: self.channels,
                        tls: listener.tls
                    )
                },
                configuration: .init(address: .hostname(configuration.host, port: listenerPort), serverName: "duplex-server"),
                onServerRunning: { [self] channel in
                    let bound = channel.localAddress?.port ?? listenerPort
                    if let fault {
                        lifecycle.withLockedValue { $0.faultPorts[fault] = bound }
                    }
                    let all: Int? = startup.withLockedValue { state in
                        if fault == nil { state.port = bound }
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
            configuration: .init(
                services: applications + [ShutdownCoordinator(server: self)],
                gracefulShutdownSignals: [],
                logger: logger
            )
        )
    }

    /// The port of each TLS fault's listener (``DuplexServerTLS/faults``), once the server
    /// listens; empty without them.
    public var tlsFaultPorts: [TLSFault: Int] {
        lifecycle.withLockedValue { $0.faultPorts }
    }

    /// The scheme the server serves: `https` with ``DuplexServerConfiguration/tls``, else `http`.
    var scheme: String { configuration.tls == nil ? "http" : "https" }

    /// The port the server listens on, once it does.
    ///
    /// Waits until the server is listening. Cancel the calling task to stop waiting.
    /// - Throws: the error the server failed with, ``DuplexServerError`` when it stopped before
    ///   it listened, or `CancellationError`.
    public func port() async throws -> Int {
        let waiterID = lifecycle.withLockedValue { state in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Int, any Error>) in
                let outcome: Result<Int, any Error>? = lifecycle.withLockedValue { state in
                    if let port = state.port { return .success(port) }
                    if let failure = state.failure { return .failure(failure) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.waiters[waiterID] = continuation
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            lifecycle.withLockedValue { $0.waiters.removeValue(forKey: waiterID) }?.resume(throwing: CancellationError())
        }
    }

    /// The number of open WebSocket connections and SSE streams.
    public var connectionCount: Int { connections.count }

    private struct Lifecycle {
        var port: Int?
        var failure: (any Error)?
        var nextWaiterID: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Int, any Error>] = [:]
        /// The port held through a restart, until the server listens again.
        var reservation: PortReservation?
        /// Where each TLS fault listens; kept through restarts.
        var faultPorts: [TLSFault: Int] = [:]
    }

    private func didStart(port: Int) {
        lifecycle.withLockedValue { state in
            defer { state.reservation = nil }
            return state.reservation
        }?.release()
        let waiters = lifecycle.withLockedValue { state in
            if state.port != nil { return [CheckedContinuation<Int, any Error>]() }  // back after a restart
            state.port = port
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        logger.info("listening", metadata: ["host": "\(configuration.host)", "port": "\(port)", "scheme": "\(scheme)"])
        for waiter in waiters { waiter.resume(returning: port) }
    }

    private func didStop(error: (any Error)?) {
        lifecycle.withLockedValue { state in
            defer { state.reservation = nil }
            return state.reservation
        }?.release()
        let waiters = lifecycle.withLockedValue { state in
            if state.port == nil { state.failure = error ?? DuplexServerError.stoppedBeforeListening }
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume(throwing: error ?? DuplexServerError.stoppedBeforeListening) }
    }
}

extension DuplexServer {
    /// The tracer connections report spans to: the configuration's, or the bootstrapped
    /// `InstrumentationSystem`'s; nil when neither is set (nothing is made per connection).
    var activeTracer: (any Tracer)? {
        if let tracer = configuration.tracer { return tracer }
        let global = InstrumentationSystem.tracer
        return global is NoOpTracer ? nil : global
    }
}
