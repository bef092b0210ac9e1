import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// How a client reaches a server, for the WebSocket transport and the SSE client alike: TCP to
/// the server or to its proxy, the proxy's tunnel, TLS for a secure endpoint (nothing is written
/// to the server until the handshake is done, the key is strong enough and the pins hold, see
/// ``TLSGate``), and then the caller's own stage on the channel (the WebSocket handshake, or an
/// SSE request up to its response head). All of it must finish within one deadline.
struct ClientConnector: Sendable {
    /// The server's host (a name or an address literal, without brackets), port and scheme.
    var host: String
    var port: Int
    var secure: Bool
    var tlsTrust: TLSTrust
    var tlsIdentity: TLSIdentity?
    var proxy: Proxy?
    /// The deadline for everything, from the TCP connection to the end of the caller's stage.
    var timeout: Duration
    /// The channel's write-buffer watermarks, when the caller sets them.
    var waterMark: ChannelOptions.Types.WriteBufferWaterMark?
    /// What the caller's stage is, for the timeout's message: "the handshake", "the request".
    var stageName: String
    /// The application protocols TLS offers by ALPN, in order of preference (`h2`,
    /// `http/1.1`); empty offers none, as HTTP/1.1 clients need not.
    var applicationProtocols: [String] = []
    /// The event loop the connection is made on; nil takes one of NIO's shared group. A server
    /// that passes a connection's messages on asks for its own loop, so that both connections'
    /// handlers run there with no hop between them.
    var eventLoop: (any EventLoop)?
    /// The sizes of the buffer the connection reads into, when not NIO's (which starts at 2 KiB
    /// and keeps that buffer between reads).
    var receiveSizes: AdaptiveRecvByteBufferAllocator?

    /// A connector to `endpoint` with the TLS, proxy and timeout settings of a configuration.
    init(
        endpoint: WebSocketRequest.Endpoint, settings: some ConnectionSettings, waterMark: ChannelOptions.Types.WriteBufferWaterMark?,
        stageName: String
    ) {
        self.host = endpoint.host
        self.port = endpoint.port
        self.secure = endpoint.secure
        self.tlsTrust = settings.tlsTrust
        self.tlsIdentity = settings.tlsIdentity
        self.proxy = settings.proxy
        self.timeout = settings.connectTimeout
        self.waterMark = waterMark
        self.stageName = stageName
    }

    /// Connects and runs `stage` on the channel's event loop once the channel talks to the server
    /// (through the tunnel and TLS, if any). Cancelling the task closes the channel.
    /// - Throws: ``WebSocketError`` for a failure on the way (``WebSocketError/Code/connectTimeout``,
    ///   ``WebSocketError/Code/proxyFailed``, ``WebSocketError/Code/tlsFailed`` with its cause,
    ///   ``WebSocketError/Code/connectionFailed``, ``WebSocketError/Code/invalidURL`` for a
    ///   malformed proxy variable), `CancellationError`, or what `stage` failed with, unchanged.
    func connect<Output: Sendable>(_ stage: @escaping @Sendable (any Channel) throws -> EventLoopFuture<Output>) async throws -> Output {
        try await connectNegotiating { channel, _ in try stage(channel) }
    }

    /// ``connect(_:)``, with the application protocol ALPN chose (nil for a plain connection, or
    /// when none was chosen) passed to `stage`.
    func connectNegotiating<Output: Sendable>(_ stage: @escaping @Sendable (any Channel, String?) throws -> EventLoopFuture<Output>) async throws
        -> Output
    {
        let sslContext = try secure ? Self.makeSSLContext(tlsTrust, identity: tlsIdentity, applicationProtocols: applicationProtocols) : nil
        let route = try proxy?.route(secure: secure, host: host)
        let (connectHost, connectPort) = route.map(\.address) ?? (host, port)
        let deadline = NIODeadline.now() + TimeAmount(timeout)
        let tlsGate = secure ? TLSGate(pins: tlsTrust.pins) : nil
        let progress = NIOLockedValueBox(Progress())
        // A loop that cannot make sockets (an embedded one) leaves the choice to the shared group.
        var bootstrap = (eventLoop.flatMap { ClientBootstrap(validatingGroup: $0) } ?? ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton))
            .connectTimeout(TimeAmount(timeout))
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
        if let waterMark {
            bootstrap = bootstrap.channelOption(ChannelOptions.writeBufferWaterMark, value: waterMark)
        }
        if let receiveSizes {
            bootstrap = bootstrap.channelOption(ChannelOptions.recvAllocator, value: receiveSizes)
        }
        do {
            return try await withTaskCancellationHandler {
                let staged: EventLoopFuture<Output> = try await bootstrap.connect(host: connectHost, port: connectPort) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let cancelled = progress.withLockedValue { progress in
                            progress.channel = channel
                            return progress.cancelled
                        }
                        if cancelled { throw CancellationError() }
                        return try setUp(
                            channel, sslContext: sslContext, tlsGate: tlsGate, route: route, deadline: deadline, progress: progress, stage: stage)
                    }
                }
                return try await staged.get()
            } onCancel: {
                let channel = progress.withLockedValue { progress in
                    progress.cancelled = true
                    return progress.channel
                }
                channel?.close(promise: nil)
            }
        } catch {
            let (cancelled, timedOut) = progress.withLockedValue { ($0.cancelled, $0.timedOut) }
            if cancelled { throw CancellationError() }
            if timedOut {
                throw WebSocketError(.connectTimeout, "\(stageName) with \(target) did not finish within \(timeout)")
            }
            if let route, error is NIOConnectionError || (error is IOError && !(error is WebSocketError)) {
                let (host, port) = route.address
                throw WebSocketError(.proxyFailed, "could not connect to the proxy \(host):\(port): \(SystemErrorText.describe(error))")
            }
            throw describe(error, peer: tlsGate?.peer)
        }
    }

    /// What happened to one connection, for the error that ends it.
    private struct Progress {
        var channel: (any Channel)?
        var cancelled = false
        var timedOut = false
    }

    /// `host:port`, as errors name the server.
    private var target: String {
        "\(host.contains(":") ? "[\(host)]" : host):\(port)"
    }

    /// The connection's stages, each once the one before is done: the proxy's tunnel, if any;
    /// TLS, if secure; then the caller's stage. The deadline closes the channel.
    private func setUp<Output: Sendable>(
        _ channel: any Channel,
        sslContext: NIOSSLContext?,
        tlsGate: TLSGate?,
        route: Proxy.Route?,
        deadline: NIODeadline,
        progress: NIOLockedValueBox<Progress>,
        stage: @escaping @Sendable (any Channel, String?) throws -> EventLoopFuture<Output>
    ) throws -> EventLoopFuture<Output> {
        let timeout = channel.eventLoop.scheduleTask(deadline: deadline) {
            progress.withLockedValue { $0.timedOut = true }
            channel.close(promise: nil)
        }
        let (host, port) = (self.host, self.port)
        let tunnel =
            try route.map { try ProxyTunnel.open($0, on: channel, to: host, port: port, deadline: deadline) }
            ?? channel.eventLoop.makeSucceededVoidFuture()
        let secured = tunnel.flatMapThrowing { () -> EventLoopFuture<Void> in
            guard let sslContext, let tlsGate else { return channel.eventLoop.makeSucceededVoidFuture() }
            let serverName = host.isIPAddress ? nil : host
            try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverName))
            try channel.pipeline.syncOperations.addHandler(tlsGate)
            return tlsGate.established(on: channel.eventLoop)
        }.flatMap { $0 }
        let staged = secured.flatMapThrowing { try stage(channel, tlsGate?.negotiatedProtocol) }.flatMap { $0 }
        staged.whenComplete { result in
            timeout.cancel()
            if case .failure = result { channel.close(promise: nil) }
        }
        return staged
    }

    static func makeSSLContext(_ trust: TLSTrust, identity: TLSIdentity?, applicationProtocols: [String] = []) throws -> NIOSSLContext {
        var configuration = try trust.clientConfiguration(identity: identity)
        configuration.applicationProtocols = applicationProtocols
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw WebSocketError(.tlsFailed, "TLS could not be set up: \(error)")
        }
    }

    /// The error for a failure on the way to the server; what it does not know (the caller's
    /// stage's own errors) is returned unchanged.
    private func describe(_ error: any Error, peer: NIOSSLCertificate?) -> any Error {
        if let cause = TLSDiagnosis.cause(of: error, peer: peer) {
            return WebSocketError(.tlsFailed, "TLS with \(target) failed: \(cause)")
        }
        switch error {
        case ChannelError.connectTimeout:
            return WebSocketError(.connectTimeout, "no connection to \(target) within \(timeout)")
        case let error as HTTPParserError where error == .invalidEOFState:
            return WebSocketError(.connectionFailed, "\(target) closed the connection during \(stageName)")
        case let error as NIOConnectionError:
            if error.dnsAAAAError != nil || error.dnsAError != nil, error.connectionErrors.isEmpty {
                return WebSocketError(.connectionFailed, "could not resolve \(host)")
            }
            return WebSocketError(
                .connectionFailed,
                "could not connect to \(target): \(error.connectionErrors.first.map { SystemErrorText.describe($0.error) } ?? "no address could be reached")"
            )
        case let error as IOError:
            return WebSocketError(.connectionFailed, "could not connect to \(target): \(SystemErrorText.describe(error))")
        case ChannelError.ioOnClosedChannel, ChannelError.alreadyClosed, ChannelError.eof:
            return WebSocketError(.connectionFailed, "\(target) closed the connection during \(stageName)")
        default:
            return error
        }
    }
}

/// What ``ClientConnector`` takes from a client's configuration.
protocol ConnectionSettings {
    var tlsTrust: TLSTrust { get }
    var tlsIdentity: TLSIdentity? { get }
    var proxy: Proxy? { get }
    var connectTimeout: Duration { get }
}

extension WebSocketConfiguration: ConnectionSettings {}
extension SSEConfiguration: ConnectionSettings {}

extension TimeAmount {
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}

extension String {
    /// Whether the string is an IPv4 or IPv6 address literal (no SNI is sent for those).
    var isIPAddress: Bool {
        (try? SocketAddress(ipAddress: self, port: 0)) != nil
    }
}
