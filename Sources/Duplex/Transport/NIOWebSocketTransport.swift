import DuplexSchema
import DuplexWire
import Foundation
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOHTTPTypes
import NIOHTTPTypesHTTP2
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
    /// The event loop HTTP/1.1 connections are made on; nil takes one of NIO's shared group.
    var eventLoop: (any EventLoop)? = nil
    /// The sizes of the buffer HTTP/1.1 connections read into; nil: NIO's.
    var receiveSizes: AdaptiveRecvByteBufferAllocator? = nil

    private enum UpgradeResult: Sendable {
        case upgraded(NIOWebSocketConnection)
        case notUpgraded(status: Int?, retryAfter: String?, body: String?, headers: [HTTPHeader])
    }

    func connect(
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) async throws -> any WebSocketTransportConnection {
        let endpoint = try request.endpoint()
        if let problem = RequestHeaderCheck.problem(request.additionalHeaders) {
            throw WebSocketError(.invalidHeader, problem)
        }
        switch configuration.httpVersion {
        case .http1:
            return try await connectHTTP1(request: request, endpoint: endpoint, configuration: configuration, delegate: delegate)
        case .http2:
            guard endpoint.secure else {
                throw WebSocketError(.handshakeFailed, "WebSockets over HTTP/2 need wss://; this URL is ws://")
            }
            do {
                return try await connectHTTP2(request: request, endpoint: endpoint, configuration: configuration, delegate: delegate)
            } catch let unavailable as HTTP2ClientConnection.Unavailable {
                throw WebSocketError(.handshakeFailed, "\(endpoint.host):\(endpoint.port): \(unavailable.reason)")
            }
        case .automatic:
            let key = HTTP2ClientPool.Key(endpoint: endpoint, settings: configuration)
            if endpoint.secure, !HTTP2ClientPool.shared.isWithoutHTTP2(key, forWebSockets: true) {
                do {
                    return try await connectHTTP2(request: request, endpoint: endpoint, configuration: configuration, delegate: delegate)
                } catch let unavailable as HTTP2ClientConnection.Unavailable {
                    HTTP2ClientPool.shared.markWithout(unavailable, key)
                }
            }
            return try await connectHTTP1(request: request, endpoint: endpoint, configuration: configuration, delegate: delegate)
        }
    }

    /// A connection of its own, and the HTTP/1.1 `Upgrade` handshake.
    private func connectHTTP1(
        request: WebSocketRequest,
        endpoint: WebSocketRequest.Endpoint,
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) async throws -> any WebSocketTransportConnection {
        var connector = ClientConnector(
            endpoint: endpoint, settings: configuration, waterMark: Self.waterMark(configuration), stageName: "the handshake")
        connector.eventLoop = eventLoop
        connector.receiveSizes = receiveSizes
        let result: UpgradeResult
        do {
            result = try await connector.connect { channel in
                try Self.configureUpgrade(channel: channel, endpoint: endpoint, request: request, configuration: configuration, delegate: delegate)
            }
        } catch {
            throw Self.describe(error, endpoint: endpoint)
        }
        switch result {
        case .upgraded(let connection):
            return connection
        case .notUpgraded(let status, let retryAfter, let body, let headers):
            let shown = status.map { "HTTP \($0)" } ?? "a response that was not 101"
            var error = WebSocketError(
                .upgradeRejected, "the server answered the WebSocket handshake with \(shown)", status: status,
                retryAfter: retryAfter.flatMap(DelayArithmetic.retryAfter))
            error.body = body.flatMap { $0.isEmpty ? nil : $0 }
            error.headers = headers
            throw error
        }
    }

    /// A stream on the origin's shared HTTP/2 connection (``HTTP2ClientPool``), and RFC 8441's
    /// extended CONNECT on it.
    /// - Throws: ``HTTP2ClientConnection/Unavailable`` when the server has no HTTP/2 or does
    ///   not announce extended CONNECT; otherwise what the HTTP/1.1 path throws for the same
    ///   failures.
    private func connectHTTP2(
        request: WebSocketRequest,
        endpoint: WebSocketRequest.Endpoint,
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) async throws -> any WebSocketTransportConnection {
        let waterMark = Self.waterMark(configuration)
        let leasing: @Sendable () async throws -> HTTP2ClientPool.Lease = {
            do {
                return try await HTTP2ClientPool.shared.lease(
                    endpoint: endpoint, settings: configuration, preference: configuration.httpVersion, waterMark: waterMark, forWebSockets: true)
            } catch let unavailable as HTTP2ClientConnection.Unavailable {
                throw unavailable
            } catch {
                throw Self.describe(error, endpoint: endpoint)
            }
        }
        let head = Self.connectRequest(request: request, endpoint: endpoint, configuration: configuration)
        do {
            return try await openWebSocketStream(leasing: leasing, head: head, request: request, configuration: configuration, delegate: delegate)
        } catch let unavailable as HTTP2ClientConnection.Unavailable {
            throw unavailable
        } catch {
            // A stream the connection could not open fails as a connection that could not be
            // made (one the server did not act on was tried on a new connection first).
            throw Self.describe(error, endpoint: endpoint)
        }
    }

    /// The WebSocket's stream on a connection `leasing` gives: the CONNECT, and the socket once
    /// the server answered 200.
    private func openWebSocketStream(
        leasing: @escaping @Sendable () async throws -> HTTP2ClientPool.Lease,
        head: HTTPRequest,
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) async throws -> NIOWebSocketConnection {
        try await HTTP2ClientPool.shared.openStream(leasing: leasing) { (channel, opened: EventLoopPromise<NIOWebSocketConnection>) in
            let answer = channel.eventLoop.makePromise(of: HTTP2WebSocketHandshake.Answer.self)
            let handshake = HTTP2WebSocketHandshake(request: head, timeout: TimeAmount(configuration.connectTimeout), response: answer)
            try channel.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTPClientCodec())
            try channel.pipeline.syncOperations.addHandler(handshake)
            let loopBoundHandshake = NIOLoopBound(handshake, eventLoop: channel.eventLoop)
            answer.futureResult.flatMapThrowing { answer in
                let response = answer.head
                guard response.status == .ok else {
                    let code = response.status.code
                    var error = WebSocketError(
                        .upgradeRejected, "the server answered the WebSocket's CONNECT with HTTP \(code)", status: code,
                        retryAfter: response.headerFields[.retryAfter].flatMap(DelayArithmetic.retryAfter))
                    error.body = answer.body
                    error.headers = response.headerFields.map { HTTPHeader(name: $0.name.rawName, value: $0.value) }
                    throw error
                }
                let operations = channel.pipeline.syncOperations
                let handshake = loopBoundHandshake.value
                try operations.addHandler(HTTP2WebSocketStream<HTTP2WebSocketClientParts>(), position: .after(handshake))
                operations.removeHandler(handshake, promise: nil)
                return try Self.serve(
                    channel,
                    chosen: response.headerFields[.secWebSocketProtocol],
                    extensionAnswers: response.headerFields[values: .secWebSocketExtensions],
                    offered: request.protocols,
                    configuration: configuration,
                    delegate: delegate
                )
            }.whenComplete { result in
                if case .failure = result { channel.close(promise: nil) }
                opened.completeWith(result)
            }
        }
    }

    /// RFC 8441's request: `CONNECT` with `:protocol = websocket`, and the headers an HTTP/1.1
    /// upgrade would carry but for those HTTP/2 leaves out (`Host` is `:authority`; no
    /// `Sec-WebSocket-Key`, `Upgrade` or `Connection`).
    private static func connectRequest(request: WebSocketRequest, endpoint: WebSocketRequest.Endpoint, configuration: WebSocketConfiguration)
        -> HTTPRequest
    {
        var head = HTTPRequest(method: .connect, scheme: "https", authority: endpoint.hostHeader, path: endpoint.target)
        head.extendedConnectProtocol = "websocket"
        head.headerFields[.secWebSocketVersion] = "13"
        if !request.protocols.isEmpty { head.headerFields[.secWebSocketProtocol] = request.protocols.joined(separator: ", ") }
        if let compression = configuration.compression {
            head.headerFields[.secWebSocketExtensions] = PerMessageDeflateNegotiation.offer(compression)
        }
        for (name, value) in request.additionalHeaders.sorted(by: { $0.key < $1.key }) {
            if let name = HTTPField.Name(name) { head.headerFields.append(HTTPField(name: name, value: value)) }
        }
        return head
    }

    /// The HTTP/1.1 upgrade request and the WebSocket pipeline that follows it.
    private static func configureUpgrade(
        channel: any Channel,
        endpoint: WebSocketRequest.Endpoint,
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) throws -> EventLoopFuture<UpgradeResult> {
        let statusRecorder = ResponseStatusRecorder(bodyLimit: WebSocketError.bodyLimit)
        let offered = request.protocols
        let upgrader = NIOTypedWebSocketClientUpgrader<UpgradeResult>(
            maxFrameSize: max(configuration.maxMessageBytes, 125),
            enableAutomaticErrorHandling: false,
            upgradePipelineHandler: { channel, response in
                channel.eventLoop.makeCompletedFuture {
                    .upgraded(
                        try Self.serve(
                            channel,
                            chosen: response.headers.first(name: "Sec-WebSocket-Protocol"),
                            extensionAnswers: response.headers["Sec-WebSocket-Extensions"],
                            offered: offered,
                            configuration: configuration,
                            delegate: delegate
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
                // The refusal's body says why (a JSON error, a rate limit's text): read its first
                // bytes, bounded, before closing.
                statusRecorder.responseRead(on: channel.eventLoop).map {
                    channel.close(promise: nil)
                    return .notUpgraded(
                        status: statusRecorder.status.withLockedValue { $0 },
                        retryAfter: statusRecorder.retryAfter.withLockedValue { $0 },
                        body: statusRecorder.body.withLockedValue { $0 },
                        headers: statusRecorder.headers.withLockedValue { $0 })
                }
            }
        )
        var pipelineConfiguration = NIOUpgradableHTTPClientPipelineConfiguration(upgradeConfiguration: upgradeConfiguration)
        pipelineConfiguration.leftOverBytesStrategy = .forwardBytes
        let upgraded = try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(configuration: pipelineConfiguration)
        let upgradeHandler = try channel.pipeline.syncOperations.handler(type: NIOTypedHTTPClientUpgradeHandler<UpgradeResult>.self)
        try channel.pipeline.syncOperations.addHandler(statusRecorder, position: .before(upgradeHandler))
        return upgraded
    }

    /// Serves a WebSocket on `channel` once the server accepted it (101 over HTTP/1.1, 200 over
    /// HTTP/2), after checking what it chose: a subprotocol that was offered, and at most the
    /// permessage-deflate the client offered.
    /// - Throws: ``WebSocketError/Code/unexpectedSubprotocol``, ``WebSocketError/Code/unexpectedExtension``.
    static func serve(
        _ channel: any Channel,
        chosen: String?,
        extensionAnswers: [String],
        offered: [String],
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) throws -> NIOWebSocketConnection {
        if let chosen, !offered.contains(chosen) {
            throw WebSocketError(.unexpectedSubprotocol, "the server chose subprotocol \(chosen.debugDescription), which was not offered")
        }
        // The only extension the client may offer is permessage-deflate.
        var deflate: DeflateContext?
        let answers = extensionAnswers.filter { !$0.allSatisfy(\.isWhitespace) }
        if !answers.isEmpty {
            guard let offeredDeflate = configuration.compression else {
                throw WebSocketError(
                    .unexpectedExtension,
                    "the server enabled the extension \(answers.joined(separator: ", ").prefix(100).debugDescription), which was not offered")
            }
            let answer = answers.joined(separator: ", ")
            let agreement: DeflateAgreement
            do {
                agreement = try PerMessageDeflateNegotiation.accept(answer, offered: offeredDeflate)
            } catch {
                // accept throws only its Refusal (typed throws).
                throw WebSocketError(
                    .unexpectedExtension, "the server's permessage-deflate answer \(answer.prefix(100).debugDescription) \(error.reason)")
            }
            // The connection's own zlib streams (made on first use), going on from message to
            // message.
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
        // It reads and writes the bytes itself: NIO's decoder is taken out.
        try WebSocketPipeline.add(handler, to: channel.pipeline.syncOperations)
        return NIOWebSocketConnection(
            channel: channel,
            handler: handler,
            outbox: outbox,
            negotiatedProtocol: chosen,
            negotiatedExtensions: answers.isEmpty ? nil : answers.joined(separator: ", ")
        )
    }

    /// The channel's watermarks, whatever the configuration holds (NIO traps on low < 1 or
    /// low > high): a low watermark above the high one is taken as the high one.
    static func waterMark(_ configuration: WebSocketConfiguration) -> ChannelOptions.Types.WriteBufferWaterMark {
        let high = max(configuration.sendBufferHighWatermark, 1)
        return .init(low: min(max(configuration.sendBufferLowWatermark, 1), high), high: high)
    }

    /// The error for what the connector leaves to the handshake: the upgrade's and the HTTP
    /// parser's errors.
    private static func describe(_ error: any Error, endpoint: WebSocketRequest.Endpoint) -> any Error {
        let target = "\(endpoint.host):\(endpoint.port)"
        switch error {
        case let error as NIOHTTPClientUpgradeError where error == .upgraderDeniedUpgrade:
            return WebSocketError(.handshakeFailed, "\(target) answered with a wrong Sec-WebSocket-Accept: it did not prove it read the handshake")
        case let error as NIOHTTPClientUpgradeError:
            return WebSocketError(.handshakeFailed, "\(target) answered the handshake with a response that is not a WebSocket upgrade (\(error))")
        case let error as HTTPParserError where error == .headerOverflow:
            return WebSocketError(.handshakeFailed, "\(target) answered the handshake with headers over the size limit")
        case let error as HTTPParserError:
            return WebSocketError(.handshakeFailed, "\(target) answered the handshake with a malformed HTTP response (\(error))")
        case is WebSocketError, is CancellationError:
            return error
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
        channel.eventLoop.execute {
            // Over HTTP/2 the stream is reset, not ended: as abrupt as a TCP close.
            channel.pipeline.triggerUserOutboundEvent(AbruptClose(), promise: nil)
            channel.close(mode: .all, promise: nil)
        }
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
