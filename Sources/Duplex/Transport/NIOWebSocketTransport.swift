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
            .channelOption(ChannelOptions.writeBufferWaterMark, value: Self.waterMark(configuration))
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
                    // The only extension the client may offer is permessage-deflate.
                    var codec: PerMessageDeflateCodec?
                    let answers = response.headers["Sec-WebSocket-Extensions"].filter { !$0.allSatisfy(\.isWhitespace) }
                    if !answers.isEmpty {
                        guard let offeredDeflate = configuration.compression else {
                            throw WebSocketError(.unexpectedExtension, "the server enabled the extension \(answers.joined(separator: ", ").prefix(100).debugDescription), which was not offered")
                        }
                        let agreement = try PerMessageDeflateNegotiation.accept(answers.joined(separator: ", "), offered: offeredDeflate)
                        codec = PerMessageDeflateCodec(agreement: agreement)
                    }
                    let outbox = Outbox(highWatermark: max(configuration.sendBufferHighWatermark, 1))
                    let handler = WebSocketClientHandler(
                        maxMessageBytes: configuration.maxMessageBytes,
                        compression: codec,
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

        // The handshake (and TLS) must finish by the deadline.
        let timeout = channel.eventLoop.scheduleTask(deadline: deadline) {
            timedOut.withLockedValue { $0 = true }
            channel.close(promise: nil)
        }
        upgraded.whenComplete { _ in timeout.cancel() }
        return upgraded
    }

    /// The channel's watermarks, whatever the configuration holds (NIO traps on low < 1 or
    /// low > high): a low watermark above the high one is taken as the high one.
    static func waterMark(_ configuration: WebSocketConfiguration) -> ChannelOptions.Types.WriteBufferWaterMark {
        let high = max(configuration.sendBufferHighWatermark, 1)
        return .init(low: min(max(configuration.sendBufferLowWatermark, 1), high), high: high)
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

/// The channel handler that runs ``WebSocketFrameStateMachine`` on the event loop, drains the
/// ``Outbox`` while the channel is writable, and holds back reads while the consumers are behind.
final class WebSocketClientHandler: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var stateMachine: WebSocketFrameStateMachine
    private let closeTimeout: TimeAmount
    private let outbox: Outbox
    /// Senders held back by the outbox go on once it is down to this many bytes.
    private let lowWatermark: Int
    private let delegate: any WebSocketTransportDelegate
    private var context: ChannelHandlerContext?
    private var peerClose: (code: WebSocketCloseCode, reason: String)?
    private var failure: WebSocketError?
    private var reported = false
    private var maskingKeys = MaskingKeys()
    /// Messages handed to the channel, and confirmed written, since the connection opened.
    private var handed = 0
    private var confirmed = 0
    /// Messages taken from the outbox once the connection was closing: never written.
    private var droppedWhileClosing = 0
    /// Flushes waiting for the messages handed before them to be written, oldest first.
    private var flushWaiters: [(upTo: Int, completion: @Sendable (Result<Void, any Error>) -> Void)] = []
    /// A read the consumers held back.
    private var readHeld = false
    /// permessage-deflate, when negotiated.
    private let compression: PerMessageDeflateCodec?

    init(
        maxMessageBytes: Int,
        compression: PerMessageDeflateCodec? = nil,
        closeTimeout: TimeAmount,
        outbox: Outbox,
        lowWatermark: Int,
        delegate: any WebSocketTransportDelegate
    ) {
        self.lowWatermark = lowWatermark
        self.compression = compression
        self.stateMachine = WebSocketFrameStateMachine(maxMessageBytes: maxMessageBytes, compressionNegotiated: compression != nil)
        self.closeTimeout = closeTimeout
        self.outbox = outbox
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

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { drain() }
        context.fireChannelWritabilityChanged()
    }

    func read(context: ChannelHandlerContext) {
        if delegate.transportShouldRead() {
            context.read()
        } else {
            readHeld = true
        }
    }

    // MARK: Requests from the socket, on the event loop

    /// Hands what the outbox holds to the channel, with one flush; `force` writes even when the
    /// channel is not writable (before a close frame).
    func drain(force: Bool = false) {
        guard let context else { return }
        // Not writable: the drain stays scheduled, and channelWritabilityChanged runs it.
        guard force || context.channel.isWritable else { return }
        // A bounded batch per event-loop turn, so one busy connection does not hold back the
        // others on its loop; the rest goes in the next turn (all of it before a close).
        let (entries, drained, more) = outbox.take(upTo: force ? .max : Self.batchLimit, lowWatermark: lowWatermark)
        var last: WebSocketFrame?
        for entry in entries {
            switch entry {
            case .message(let message):
                guard stateMachine.canSend else {
                    droppedWhileClosing += 1
                    continue
                }
                if let previous = last { context.write(wrapOutboundOut(previous), promise: nil) }
                last = frame(for: message, allocator: context.channel.allocator)
                handed += 1
            case .flush(let completion):
                flushWaiters.append((handed, completion))
            }
        }
        if let last {
            let batchEnd = handed
            let promise = context.eventLoop.makePromise(of: Void.self)
            context.writeAndFlush(wrapOutboundOut(last), promise: promise)
            promise.futureResult.assumeIsolated().whenSuccess { self.confirm(upTo: batchEnd) }
        } else {
            confirm(upTo: confirmed)
        }
        if drained { delegate.transportDidDrain() }
        if more {
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            context.eventLoop.execute { handler.value.drain() }
        }
    }

    /// The most messages written in one event-loop turn.
    static let batchLimit = 256

    private func frame(for message: WebSocketMessage, allocator: ByteBufferAllocator) -> WebSocketFrame {
        let (opcode, payload): (WebSocketOpcode, ByteBuffer) = switch message {
        case .string(let text): (.text, allocator.buffer(string: text))
        case .data(let data): (.binary, allocator.buffer(bytes: data))
        }
        if let compression, compression.compresses(payload.readableBytes),
            let compressed = try? compression.compress(payload, allocator: allocator)
        {
            return WebSocketFrame(fin: true, rsv1: true, opcode: opcode, maskKey: maskingKeys.next(), data: compressed)
        }
        return WebSocketFrame(fin: true, opcode: opcode, maskKey: maskingKeys.next(), data: payload)
    }

    /// Every message up to `count` is written: completes the flushes waiting for them.
    private func confirm(upTo count: Int) {
        confirmed = max(confirmed, count)
        guard let first = flushWaiters.first, first.upTo <= confirmed else { return }
        let done = flushWaiters.prefix { $0.upTo <= confirmed }
        flushWaiters.removeFirst(done.count)
        for waiter in done { waiter.completion(.success(())) }
    }

    func sendPing(_ payload: [UInt8]) {
        guard let context, stateMachine.canSend else { return }
        let frame = WebSocketFrame(fin: true, opcode: .ping, maskKey: maskingKeys.next(), data: context.channel.allocator.buffer(bytes: payload.prefix(125)))
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
    }

    func close(code: WebSocketCloseCode, reason: String) {
        guard let context else { return }
        // What was sent before the close goes first, writable or not.
        drain(force: true)
        perform(stateMachine.close(code: code, reason: reason), context: context)
    }

    func resumeReading() {
        guard readHeld, let context, delegate.transportShouldRead() else { return }
        readHeld = false
        context.read()
    }

    // MARK: Actions

    private func perform(_ action: WebSocketFrameStateMachine.Action, context: ChannelHandlerContext) {
        switch action {
        case .none:
            break
        case .deliver(let message):
            delegate.transportDidReceive(message)
        case .inflate(let opcode, let buffer):
            guard let compression else { return }
            do {
                let inflated = try compression.inflate(buffer, maxBytes: stateMachine.maxMessageBytes, allocator: context.channel.allocator)
                perform(stateMachine.inflated(opcode: opcode, buffer: inflated), context: context)
            } catch {
                perform(stateMachine.inflationFailed(tooLarge: error == .tooLarge), context: context)
            }
        case .sendPong(let payload):
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, maskKey: maskingKeys.next(), data: payload)), promise: nil)
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
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: maskingKeys.next(), data: payload)), promise: nil)
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
        let (left, refused) = outbox.close()
        var unwritten = refused + droppedWhileClosing + (handed - confirmed)
        let lost = WebSocketError(.connectionLost, "the connection closed before the messages were written")
        for entry in left {
            switch entry {
            case .message: unwritten += 1
            case .flush(let completion): completion(.failure(lost))
            }
        }
        let waiters = flushWaiters
        flushWaiters = []
        for waiter in waiters { waiter.completion(.failure(lost)) }
        delegate.transportDidClose(code: peerClose?.code, reason: peerClose?.reason ?? "", error: failure, unwrittenMessages: unwritten)
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
