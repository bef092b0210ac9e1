import DuplexChat
import DuplexHost
public import Logging
public import ServiceLifecycle
import DuplexSchema
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import NIOConcurrencyHelpers
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
    /// Where it listens and how it serves: the front door, the route table, restarts and the
    /// graceful shutdown.
    let host: HostServer
    /// What the chat rooms count, in the server's registry.
    let chatMetrics: ChatMetrics
    /// `GET /metrics/live`'s subscribers, and their timers.
    let liveMetrics: LiveMetricsFeed
    /// Where the chat rooms live: memory, or PostgreSQL (``DuplexServerConfiguration/store``).
    let rooms: any ChatStore
    let ticks = TickClock()
    /// The sessions replayed, when the server replays a cassette.
    let replayBook: ReplayBook?
    /// What the scripted routes (``DuplexServerConfiguration/routes``) served and received, to
    /// assert on.
    public let journal = ScriptJournal()

    var logger: Logger { host.logger }
    /// What the server counts, for `GET /metrics`.
    var metrics: ServerMetrics { host.metrics }
    var connections: ConnectionRegistry { host.connections }

    /// Creates a server; nothing listens until ``run()``.
    /// - Parameters:
    ///   - configuration: addresses, limits and intervals.
    ///   - logger: where the server logs; by default a logger labelled `duplex-server`.
    public init(configuration: DuplexServerConfiguration = .init(), logger: Logger = Logger(label: "duplex-server")) {
        self.configuration = configuration
        let metrics = ServerMetrics.prometheus(transport: configuration.tls == nil ? "tcp" : "tls")
        let host = HostServer(configuration: configuration.hostConfiguration, metrics: metrics, logger: logger)
        self.host = host
        let chatMetrics = ChatMetrics(factory: metrics.factory)
        self.chatMetrics = chatMetrics
        let chaos = configuration.chaos
        self.liveMetrics = LiveMetricsFeed { metrics.liveJSON(chaos: chaos, routes: host.routeNames) }
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
        self.replayBook = configuration.replay.map(ReplayBook.init)
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
                try await host.serve(listeners: try makeListeners(), routes: { self.makeRouteTable() }) { amnesia in
                    if amnesia { rooms.forgetAll() }
                }
            } catch {
                host.failed(error)
                group.cancelAll()
                throw error
            }
            group.cancelAll()
        }
    }

    /// Stops listening, closing every connection with 1001 as a graceful shutdown does, and
    /// listens again on the same port after `downtime`.
    ///
    /// With `amnesia`, the server also forgets every chat room, as a new process would: rooms
    /// come back empty, with new epochs, so clients that resume see their history reset.
    public func restart(downFor downtime: Duration, amnesia: Bool = false) {
        host.restart(downFor: downtime, amnesia: amnesia)
    }

    /// The listeners the configuration asks for, their TLS contexts made once (certificates
    /// keep through restarts): the server's own, and each TLS fault's, named by its raw value.
    /// - Throws: ``DuplexServerError/invalidTLSConfiguration(_:)``, for the certificates or for
    ///   HTTP/2 limits out of range.
    func makeListeners() throws -> [HostServer.Listener] {
        guard let tls = configuration.tls else { return [HostServer.Listener()] }
        var serverTLS = try tls.serverConfiguration()
        if configuration.http2.enabled {
            try configuration.http2.validate()
            serverTLS.applicationProtocols = ["h2", "http/1.1"]
        }
        var listeners = [HostServer.Listener(tls: try Self.context(serverTLS))]
        if tls.faults {
            guard let authority = tls.certificateAuthority else {
                throw DuplexServerError.invalidTLSConfiguration(
                    "the TLS faults are issued by the server's own CA: make the certificate with selfSigned (--tls-self-signed)")
            }
            var hosts = DuplexServerTLS.defaultHosts
            if !hosts.contains(configuration.host), !["0.0.0.0", "::"].contains(configuration.host) { hosts.append(configuration.host) }
            for fault in TLSFault.allCases {
                listeners.append(
                    HostServer.Listener(name: fault.rawValue, tls: try Self.context(fault.serverConfiguration(authority: authority, hosts: hosts))))
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

    /// The port of each TLS fault's listener (``DuplexServerTLS/faults``), once the server
    /// listens; empty without them.
    public var tlsFaultPorts: [TLSFault: Int] {
        Dictionary(uniqueKeysWithValues: host.listenerPorts.compactMap { name, port in TLSFault(rawValue: name).map { ($0, port) } })
    }

    /// The scheme the server serves: `https` with ``DuplexServerConfiguration/tls``, else `http`.
    var scheme: String { configuration.tls == nil ? "http" : "https" }

    /// The port the server listens on, once it does.
    ///
    /// Waits until the server is listening. Cancel the calling task to stop waiting.
    /// - Throws: the error the server failed with, ``DuplexServerError`` when it stopped before
    ///   it listened, or `CancellationError`.
    public func port() async throws -> Int {
        do {
            return try await host.port()
        } catch is HostServer.StoppedBeforeListening {
            throw DuplexServerError.stoppedBeforeListening
        }
    }

    /// The number of open WebSocket connections and SSE streams.
    public var connectionCount: Int { connections.count }
}
