import DuplexSchema
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket

/// The SwiftNIO transport: TCP, NIOSSL for `wss://`, swift-nio's HTTP upgrade and WebSocket
/// frame codec, and ``WebSocketFrameStateMachine`` for the protocol.
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
        let sslContext = try endpoint.secure ? Self.makeSSLContext(configuration.tlsTrust) : nil
        let deadline = NIODeadline.now() + TimeAmount(configuration.connectTimeout)
        let timedOut = NIOLockedValueBox(false)
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(TimeAmount(configuration.connectTimeout))
            .channelOption(ChannelOptions.socketOption(.tcp_nodelay), value: 1)
        let result: UpgradeResult
        do {
            let upgrade: EventLoopFuture<UpgradeResult> = try await bootstrap.connect(host: endpoint.host, port: endpoint.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try Self.setUpPipeline(
                        channel: channel,
                        endpoint: endpoint,
                        request: request,
                        configuration: configuration,
                        sslContext: sslContext,
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
            throw Self.describe(error, endpoint: endpoint, timeout: configuration.connectTimeout)
        }
        switch result {
        case .upgraded(let connection):
            return connection
        case .notUpgraded(let status):
            let shown = status.map { "HTTP \($0)" } ?? "a response that was not 101"
            throw WebSocketError(.upgradeRejected, "the server answered the WebSocket handshake with \(shown)", status: status)
        }
    }

    private static func setUpPipeline(
        channel: any Channel,
        endpoint: WebSocketRequest.Endpoint,
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        sslContext: NIOSSLContext?,
        deadline: NIODeadline,
        timedOut: NIOLockedValueBox<Bool>,
        delegate: any WebSocketTransportDelegate
    ) throws -> EventLoopFuture<UpgradeResult> {
        if let sslContext {
            let serverName = endpoint.host.isIPAddress ? nil : endpoint.host
            try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverName))
        }
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
                    // The client offers no extension, so any the server names was not offered.
                    if let named = response.headers.first(name: "Sec-WebSocket-Extensions") {
                        throw WebSocketError(.unexpectedExtension, "the server enabled the extension \(named.prefix(100).debugDescription), which was not offered")
                    }
                    let handler = WebSocketClientHandler(
                        maxMessageBytes: configuration.maxMessageBytes,
                        closeTimeout: TimeAmount(configuration.closeTimeout),
                        delegate: delegate
                    )
                    try channel.pipeline.syncOperations.addHandler(handler)
                    return .upgraded(NIOWebSocketConnection(channel: channel, handler: handler, negotiatedProtocol: chosen))
                }
            }
        )
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: endpoint.hostHeader)
        if !offered.isEmpty { headers.add(name: "Sec-WebSocket-Protocol", value: offered.joined(separator: ", ")) }
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

        // The handshake (and TLS) must finish by the deadline.
        let timeout = channel.eventLoop.scheduleTask(deadline: deadline) {
            timedOut.withLockedValue { $0 = true }
            channel.close(promise: nil)
        }
        upgraded.whenComplete { _ in timeout.cancel() }
        return upgraded
    }

    static func makeSSLContext(_ trust: TLSTrust) throws -> NIOSSLContext {
        let configuration = try trust.clientConfiguration()
        do {
            return try NIOSSLContext(configuration: configuration)
        } catch {
            throw WebSocketError(.tlsFailed, "TLS could not be set up: \(error)")
        }
    }

    private static func describe(_ error: any Error, endpoint: WebSocketRequest.Endpoint, timeout: Duration) -> WebSocketError {
        let target = "\(endpoint.host):\(endpoint.port)"
        switch error {
        case let error as WebSocketError:
            return error
        case ChannelError.connectTimeout:
            return WebSocketError(.connectTimeout, "no connection to \(target) within \(timeout)")
        case is NIOSSLError, is BoringSSLError:
            return WebSocketError(.tlsFailed, "TLS with \(target) failed: \(error)")
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

/// Notes the status of the handshake response, so a refused upgrade can say what the server
/// answered, then leaves the pipeline.
private final class ResponseStatusRecorder: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = HTTPClientResponsePart

    let status = NIOLockedValueBox<Int?>(nil)

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data) {
            status.withLockedValue { $0 = Int(head.status.code) }
            context.fireChannelRead(data)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        context.fireChannelRead(data)
    }
}

/// An open connection of the NIO transport.
final class NIOWebSocketConnection: WebSocketTransportConnection {
    let channel: any Channel
    private let handler: NIOLoopBound<WebSocketClientHandler>
    let negotiatedProtocol: String?

    init(channel: any Channel, handler: WebSocketClientHandler, negotiatedProtocol: String?) {
        self.channel = channel
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
        self.negotiatedProtocol = negotiatedProtocol
    }

    func write(_ message: WebSocketMessage, completion: (@Sendable (Result<Void, any Error>) -> Void)?) {
        onLoop { $0.send(message, completion: completion) }
    }

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

    /// Runs `body` on the event loop, always later, never inside the caller: the socket calls
    /// these methods while holding its lock, and a synchronous close would call back into it.
    /// Submissions run in the order they were made.
    private func onLoop(_ body: @escaping @Sendable (WebSocketClientHandler) -> Void) {
        let handler = self.handler
        channel.eventLoop.execute { body(handler.value) }
    }
}

/// The channel handler that runs ``WebSocketFrameStateMachine`` on the event loop.
final class WebSocketClientHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var stateMachine: WebSocketFrameStateMachine
    private let closeTimeout: TimeAmount
    private let delegate: any WebSocketTransportDelegate
    private var context: ChannelHandlerContext?
    private var peerClose: (code: WebSocketCloseCode, reason: String)?
    private var failure: WebSocketError?
    private var reported = false

    init(maxMessageBytes: Int, closeTimeout: TimeAmount, delegate: any WebSocketTransportDelegate) {
        self.stateMachine = WebSocketFrameStateMachine(maxMessageBytes: maxMessageBytes)
        self.closeTimeout = closeTimeout
        self.delegate = delegate
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        if !context.channel.isActive {
            // The connection ended before the upgrade finished (a server can send its 101, a
            // close and its FIN in one read): channelInactive has passed, so report it here, or
            // the socket would wait forever on a dead connection.
            stateMachine.channelClosed()
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            context.eventLoop.execute { handler.value.report() }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        perform(stateMachine.received(unwrapInboundIn(data)), context: context)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOWebSocketError || error is ByteToMessageDecoderError {
            perform(stateMachine.decodingFailed(error), context: context)
        } else {
            if failure == nil, stateMachine.state != .closed {
                failure = WebSocketError(.connectionLost, "the connection failed: \(error)")
            }
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        stateMachine.channelClosed()
        report()
        context.fireChannelInactive()
    }

    // MARK: Requests from the socket, on the event loop

    func send(_ message: WebSocketMessage, completion: (@Sendable (Result<Void, any Error>) -> Void)?) {
        guard let context, stateMachine.canSend else {
            completion?(.failure(WebSocketError(.notConnected, "the connection is closing")))
            return
        }
        let frame: WebSocketFrame
        switch message {
        case .string(let text):
            frame = WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: context.channel.allocator.buffer(string: text))
        case .data(let data):
            frame = WebSocketFrame(fin: true, opcode: .binary, maskKey: .random(), data: context.channel.allocator.buffer(bytes: data))
        }
        let promise: EventLoopPromise<Void>? = completion.map { completion in
            let promise = context.eventLoop.makePromise(of: Void.self)
            promise.futureResult.whenComplete { completion($0.mapError { $0 as any Error }) }
            return promise
        }
        context.writeAndFlush(wrapOutboundOut(frame), promise: promise)
    }

    func sendPing(_ payload: [UInt8]) {
        guard let context, stateMachine.canSend else { return }
        let frame = WebSocketFrame(fin: true, opcode: .ping, maskKey: .random(), data: context.channel.allocator.buffer(bytes: payload.prefix(125)))
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
    }

    func close(code: WebSocketCloseCode, reason: String) {
        guard let context else { return }
        perform(stateMachine.close(code: code, reason: reason), context: context)
    }

    // MARK: Actions

    private func perform(_ action: WebSocketFrameStateMachine.Action, context: ChannelHandlerContext) {
        switch action {
        case .none:
            break
        case .deliver(let message):
            delegate.transportDidReceive(message)
        case .sendPong(let payload):
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: payload)), promise: nil)
        case .pongReceived(let payload):
            delegate.transportDidReceivePong(payload)
        case .replyToClose(let reply, let peerCode, let reason):
            peerClose = (peerCode, reason)
            writeClose(code: reply, reason: "", context: context)
            closeAfterTimeout(context: context)
        case .closeHandshakeDone(let peerCode, let reason):
            peerClose = (peerCode, reason)
            context.close(promise: nil)
        case .sendClose(let code, let reason):
            writeClose(code: code, reason: reason, context: context)
            closeAfterTimeout(context: context)
        case .failConnection(let code, let reason, let error, let sendCloseFrame):
            failure = error
            if sendCloseFrame {
                writeClose(code: code, reason: reason, context: context)
            }
            context.close(promise: nil)
        }
    }

    private func writeClose(code: WebSocketCloseCode?, reason: String, context: ChannelHandlerContext) {
        var payload = context.channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        if let code {
            payload.writeInteger(code.rawValue)
            payload.writeBytes(reason.utf8.prefix(123))
        }
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: payload)), promise: nil)
    }

    /// The server should end the TCP connection after the close handshake; if it does not
    /// within the close timeout, the client does.
    private func closeAfterTimeout(context: ChannelHandlerContext) {
        let channel = context.channel
        channel.eventLoop.scheduleTask(in: closeTimeout) {
            channel.close(promise: nil)
        }
    }

    private func report() {
        guard !reported else { return }
        reported = true
        delegate.transportDidClose(code: peerClose?.code, reason: peerClose?.reason ?? "", error: failure)
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
