import DuplexSchema
import DuplexWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket

/// The SwiftNIO transport: TCP, NIOSSL for `wss://`, swift-nio's HTTP upgrade and WebSocket
/// frame codec, and DuplexWire's `WebSocketEngine` (in ``WebSocketClientHandler``) for the
/// protocol.
///
/// Messages reach the delegate from the channel's event loop with no task or actor hop in
/// between; writes are submitted to the event loop in call order.
struct NIOWebSocketTransport: WebSocketTransport {
    private enum UpgradeResult: Sendable {
        case upgraded(NIOWebSocketConnection)
        case notUpgraded(status: Int?)
    }

    func connect(
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) async throws -> any WebSocketTransportConnection {
        let endpoint = try request.endpoint()
        let sslContext = try endpoint.secure ? Self.makeSSLContext(configuration.tlsTrust, identity: configuration.tlsIdentity) : nil
        let deadline = NIODeadline.now() + TimeAmount(configuration.connectTimeout)
        let timedOut = NIOLockedValueBox(false)
        let tlsGate = endpoint.secure ? TLSGate(pins: configuration.tlsTrust.pins) : nil
        let route = try configuration.proxy?.route(secure: endpoint.secure, host: endpoint.host)
        let (connectHost, connectPort) = route.map(\.address) ?? (endpoint.host, endpoint.port)
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(TimeAmount(configuration.connectTimeout))
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
            .channelOption(ChannelOptions.writeBufferWaterMark, value: Self.waterMark(configuration))
        let result: UpgradeResult
        do {
            let upgrade: EventLoopFuture<UpgradeResult> = try await bootstrap.connect(host: connectHost, port: connectPort) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try Self.setUpPipeline(
                        channel: channel,
                        endpoint: endpoint,
                        request: request,
                        configuration: configuration,
                        sslContext: sslContext,
                        tlsGate: tlsGate,
                        proxy: route,
                        deadline: deadline,
                        timedOut: timedOut,
                        delegate: delegate
                    )
                }
            }
            result = try await upgrade.get()
        } catch {
            if timedOut.withLockedValue({ $0 }) {
                throw WebSocketError(.connectTimeout, "the handshake with \(endpoint.host):\(endpoint.port) did not finish within \(configuration.connectTimeout)")
            }
            if let route, Self.isConnectFailure(error) {
                let (host, port) = route.address
                throw WebSocketError(.proxyFailed, "could not connect to the proxy \(host):\(port): \(SystemErrorText.describe(error))")
            }
            throw Self.describe(error, endpoint: endpoint, timeout: configuration.connectTimeout, peer: tlsGate?.peer)
        }
        switch result {
        case .upgraded(let connection):
            return connection
        case .notUpgraded(let status):
            let shown = status.map { "HTTP \($0)" } ?? "a response that was not 101"
            throw WebSocketError(.upgradeRejected, "the server answered the WebSocket handshake with \(shown)", status: status)
        }
    }

    /// The connection's stages, each once the one before is done: a tunnel through the proxy,
    /// if any; TLS, if `wss://` (nothing of the HTTP request is written until TLS is established
    /// and the pins hold); then the WebSocket handshake. All of it must finish by the deadline.
    private static func setUpPipeline(
        channel: any Channel,
        endpoint: WebSocketRequest.Endpoint,
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        sslContext: NIOSSLContext?,
        tlsGate: TLSGate?,
        proxy: Proxy.Route?,
        deadline: NIODeadline,
        timedOut: NIOLockedValueBox<Bool>,
        delegate: any WebSocketTransportDelegate
    ) throws -> EventLoopFuture<UpgradeResult> {
        let timeout = channel.eventLoop.scheduleTask(deadline: deadline) {
            timedOut.withLockedValue { $0 = true }
            channel.close(promise: nil)
        }
        let tunnel = try proxy.map { try ProxyTunnel.open($0, on: channel, to: endpoint.host, port: endpoint.port, deadline: deadline) } ?? channel.eventLoop.makeSucceededVoidFuture()
        let secured = tunnel.flatMapThrowing { () -> EventLoopFuture<Void> in
            guard let sslContext, let tlsGate else { return channel.eventLoop.makeSucceededVoidFuture() }
            let serverName = endpoint.host.isIPAddress ? nil : endpoint.host
            try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverName))
            try channel.pipeline.syncOperations.addHandler(tlsGate)
            return tlsGate.established(on: channel.eventLoop)
        }.flatMap { $0 }
        let upgraded = secured.flatMapThrowing {
            try configureUpgrade(channel: channel, endpoint: endpoint, request: request, configuration: configuration, delegate: delegate)
        }.flatMap { $0 }
        upgraded.whenComplete { _ in timeout.cancel() }
        return upgraded
    }

    /// The HTTP/1.1 upgrade request and the WebSocket pipeline that follows it.
    private static func configureUpgrade(
        channel: any Channel,
        endpoint: WebSocketRequest.Endpoint,
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) throws -> EventLoopFuture<UpgradeResult> {
        let statusRecorder = ResponseStatusRecorder()
        let offered = request.protocols
        let upgrader = NIOTypedWebSocketClientUpgrader<UpgradeResult>(
            maxFrameSize: max(configuration.maxMessageBytes, 125),
            enableAutomaticErrorHandling: false,
            upgradePipelineHandler: { channel, response in
                channel.eventLoop.makeCompletedFuture {
                    let chosen = response.headers.first(name: "Sec-WebSocket-Protocol")
                    if let chosen, !offered.contains(chosen) {
                        throw WebSocketError(.unexpectedSubprotocol, "the server chose subprotocol \(chosen.debugDescription), which was not offered")
                    }
                    // The only extension the client may offer is permessage-deflate.
                    var deflate: DeflateContext?
                    let answers = response.headers["Sec-WebSocket-Extensions"].filter { !$0.allSatisfy(\.isWhitespace) }
                    if !answers.isEmpty {
                        guard let offeredDeflate = configuration.compression else {
                            throw WebSocketError(.unexpectedExtension, "the server enabled the extension \(answers.joined(separator: ", ").prefix(100).debugDescription), which was not offered")
                        }
                        let answer = answers.joined(separator: ", ")
                        let agreement: DeflateAgreement
                        do {
                            agreement = try PerMessageDeflateNegotiation.accept(answer, offered: offeredDeflate)
                        } catch let error as PerMessageDeflateNegotiation.Refusal {
                            throw WebSocketError(.unexpectedExtension, "the server's permessage-deflate answer \(answer.prefix(100).debugDescription) \(error.reason)")
                        }
                        // The connection's own zlib streams (made on first use), going on from
                        // message to message.
                        deflate = DeflateContext(agreement: agreement, zlib: LoopZlib(memoryLevel: 8), ownStreams: true)
                    }
                    let outbox = Outbox(highWatermark: max(configuration.sendBufferHighWatermark, 1))
                    let handler = WebSocketClientHandler(
                        maxMessageBytes: configuration.maxMessageBytes,
                        deflate: deflate,
                        closeTimeout: TimeAmount(configuration.closeTimeout),
                        outbox: outbox,
                        lowWatermark: Self.waterMark(configuration).low,
                        delegate: delegate
                    )
                    try channel.pipeline.syncOperations.addHandler(handler)
                    return .upgraded(
                        NIOWebSocketConnection(
                            channel: channel,
                            handler: handler,
                            outbox: outbox,
                            negotiatedProtocol: chosen,
                            negotiatedExtensions: answers.isEmpty ? nil : answers.joined(separator: ", ")
                        )
                    )
                }
            }
        )
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: endpoint.hostHeader)
        if !offered.isEmpty { headers.add(name: "Sec-WebSocket-Protocol", value: offered.joined(separator: ", ")) }
        if let compression = configuration.compression {
            headers.add(name: "Sec-WebSocket-Extensions", value: PerMessageDeflateNegotiation.offer(compression))
        }
        for (name, value) in request.additionalHeaders.sorted(by: { $0.key < $1.key }) {
            headers.add(name: name, value: value)
        }
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: endpoint.target, headers: headers)
        let upgradeConfiguration = NIOTypedHTTPClientUpgradeConfiguration<UpgradeResult>(
            upgradeRequestHead: head,
            upgraders: [upgrader],
            notUpgradingCompletionHandler: { channel in
                channel.close(promise: nil)
                return channel.eventLoop.makeSucceededFuture(.notUpgraded(status: statusRecorder.status.withLockedValue { $0 }))
            }
        )
        var pipelineConfiguration = NIOUpgradableHTTPClientPipelineConfiguration(upgradeConfiguration: upgradeConfiguration)
        pipelineConfiguration.leftOverBytesStrategy = .forwardBytes
        let upgraded = try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(configuration: pipelineConfiguration)
        let upgradeHandler = try channel.pipeline.syncOperations.handler(type: NIOTypedHTTPClientUpgradeHandler<UpgradeResult>.self)
        try channel.pipeline.syncOperations.addHandler(statusRecorder, position: .before(upgradeHandler))
        return upgraded
    }

    /// Whether `error` is a failure to reach the first hop (refused, unreachable, unresolvable).
    private static func isConnectFailure(_ error: any Error) -> Bool {
        error is NIOConnectionError || (error is IOError && !(error is WebSocketError))
    }

    /// The channel's watermarks, whatever the configuration holds (NIO traps on low < 1 or
    /// low > high): a low watermark above the high one is taken as the high one.
    static func waterMark(_ configuration: WebSocketConfiguration) -> ChannelOptions.Types.WriteBufferWaterMark {
        let high = max(configuration.sendBufferHighWatermark, 1)
        return .init(low: min(max(configuration.sendBufferLowWatermark, 1), high), high: high)
    }

    static func makeSSLContext(_ trust: TLSTrust, identity: TLSIdentity?) throws -> NIOSSLContext {
        let configuration = try trust.clientConfiguration(identity: identity)
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw WebSocketError(.tlsFailed, "TLS could not be set up: \(error)")
        }
    }

    private static func describe(_ error: any Error, endpoint: WebSocketRequest.Endpoint, timeout: Duration, peer: NIOSSLCertificate?) -> WebSocketError {
        let target = "\(endpoint.host):\(endpoint.port)"
        if let cause = TLSDiagnosis.cause(of: error, peer: peer) {
            return WebSocketError(.tlsFailed, "TLS with \(target) failed: \(cause)")
        }
        switch error {
        case let error as WebSocketError:
            return error
        case ChannelError.connectTimeout:
            return WebSocketError(.connectTimeout, "no connection to \(target) within \(timeout)")
        case let error as NIOHTTPClientUpgradeError where error == .upgraderDeniedUpgrade:
            return WebSocketError(.handshakeFailed, "\(target) answered with a wrong Sec-WebSocket-Accept: it did not prove it read the handshake")
        case let error as NIOHTTPClientUpgradeError:
            return WebSocketError(.handshakeFailed, "\(target) answered the handshake with a response that is not a WebSocket upgrade (\(error))")
        case let error as HTTPParserError where error == .invalidEOFState:
            return WebSocketError(.connectionFailed, "\(target) closed the connection during the handshake")
        case let error as HTTPParserError where error == .headerOverflow:
            return WebSocketError(.handshakeFailed, "\(target) answered the handshake with headers over the size limit")
        case let error as HTTPParserError:
            return WebSocketError(.handshakeFailed, "\(target) answered the handshake with a malformed HTTP response (\(error))")
        case let error as NIOConnectionError:
            if error.dnsAAAAError != nil || error.dnsAError != nil, error.connectionErrors.isEmpty {
                return WebSocketError(.connectionFailed, "could not resolve \(endpoint.host)")
            }
            return WebSocketError(.connectionFailed, "could not connect to \(target): \(error.connectionErrors.first.map { SystemErrorText.describe($0.error) } ?? "no address could be reached")")
        case let error as IOError:
            return WebSocketError(.connectionFailed, "could not connect to \(target): \(SystemErrorText.describe(error))")
        case ChannelError.ioOnClosedChannel, ChannelError.alreadyClosed, ChannelError.eof:
            return WebSocketError(.connectionFailed, "\(target) closed the connection during the handshake")
        default:
            return WebSocketError(.connectionFailed, "could not connect to \(target): \(error)")
        }
    }
}

/// An open connection of the NIO transport.
final class NIOWebSocketConnection: WebSocketTransportConnection {
    let channel: any Channel
    private let handler: NIOLoopBound<WebSocketClientHandler>
    private let outbox: Outbox
    let negotiatedProtocol: String?
    let negotiatedExtensions: String?

    init(channel: any Channel, handler: WebSocketClientHandler, outbox: Outbox, negotiatedProtocol: String?, negotiatedExtensions: String?) {
        self.channel = channel
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
        self.outbox = outbox
        self.negotiatedProtocol = negotiatedProtocol
        self.negotiatedExtensions = negotiatedExtensions
    }

    func write(_ message: WebSocketMessage) -> Bool {
        let (schedule, above) = outbox.append(message)
        if schedule { onLoop { $0.drain() } }
        return above
    }

    func flush(_ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        if outbox.appendFlush(completion) { onLoop { $0.drain() } }
    }

    /// Whether the outbound buffer is above its high watermark.
    var isAboveHighWatermark: Bool { outbox.isAboveHighWatermark }

    func ping(_ payload: [UInt8]) {
        onLoop { $0.sendPing(payload) }
    }

    func close(code: WebSocketCloseCode, reason: String) {
        onLoop { $0.close(code: code, reason: reason) }
    }

    func abort() {
        let channel = self.channel
        channel.eventLoop.execute { channel.close(mode: .all, promise: nil) }
    }

    func resumeReading() {
        onLoop { $0.resumeReading() }
    }

    /// Runs `body` on the event loop, always later, never inside the caller: the socket calls
    /// these methods while holding its lock, and a synchronous close would call back into it.
    private func onLoop(_ body: @escaping @Sendable (WebSocketClientHandler) -> Void) {
        let handler = self.handler
        channel.eventLoop.execute { body(handler.value) }
    }
}

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
