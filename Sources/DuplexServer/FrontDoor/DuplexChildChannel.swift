import DuplexSchema
import DuplexWire
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import NIOWebSocket

/// How a WebSocket route serves an upgraded connection: the handlers it installs on the
/// connection's event loop (``EventLoopWebSocketHandler`` and a service), with no task per
/// connection. They get the permessage-deflate agreement, if the handshake made one, and apply
/// it.
struct WebSocketService: Sendable {
    let install: @Sendable (_ channel: any Channel, _ deflate: DeflateAgreement?) throws -> Void

    init(_ install: @escaping @Sendable (_ channel: any Channel, _ deflate: DeflateAgreement?) throws -> Void) {
        self.install = install
    }
}

/// Each connection of the server: HTTP/1.1 through Hummingbird's responder, or a WebSocket
/// upgrade. It does what hummingbird-websocket's `HTTP1WebSocketUpgradeChannel` does, except
/// that every upgraded connection is served on its event loop (``WebSocketService``): the
/// route is chosen there, `handle(value:)` returns at once, and no task stays behind for it.
struct DuplexChildChannel: ServerChildChannel, HTTPChannelHandler {
    /// What became of the connection once its first request head was read.
    enum UpgradeResult: Sendable {
        case servedOnEventLoop
        case notUpgraded(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        case failedUpgrade(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, Logger)
    }

    struct Value: ServerChildChannelValue {
        let upgradeResult: EventLoopFuture<UpgradeResult>
        let channel: any Channel
    }

    /// Picks the service for a WebSocket upgrade request, on the event loop: the response
    /// headers to add (a subprotocol, say) and the service; nil refuses the upgrade (400).
    typealias Router = @Sendable (Request) -> (HTTPFields, WebSocketService)?

    let responder: HTTPChannelHandler.Responder
    let route: Router
    let configuration: HTTP1WebSocketUpgradeChannel.Configuration
    /// The server's permessage-deflate settings; nil declines every offer.
    let compression: PerMessageDeflate?
    /// Whether the connection is over TLS (requests are `https`).
    let secure: Bool

    init(
        responder: @escaping HTTPChannelHandler.Responder,
        configuration: HTTP1WebSocketUpgradeChannel.Configuration,
        compression: PerMessageDeflate?,
        secure: Bool,
        route: @escaping Router
    ) {
        self.secure = secure
        self.responder = Self.upgradeRedirecting(responder)
        self.configuration = configuration
        self.compression = compression
        self.route = route
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let upgradeAttempted = NIOLoopBoundBox(false, eventLoop: channel.eventLoop)
            let chosen = NIOLoopBoundBox<(service: WebSocketService, deflate: DeflateAgreement?)?>(nil, eventLoop: channel.eventLoop)
            let configuration = self.configuration
            let compression = self.compression
            let route = self.route
            let secure = self.secure
            let upgrader = NIOTypedWebSocketServerUpgrader<UpgradeResult>(
                maxFrameSize: configuration.ws.maxFrameSize,
                // Frames the decoder refuses are answered by the connection's handler, once
                // (EventLoopWebSocketHandler.errorCaught).
                enableAutomaticErrorHandling: false,
                shouldUpgrade: { channel, head in
                    upgradeAttempted.value = true
                    let request: Request
                    do {
                        request = Request(head: try HTTPRequest(head, secure: secure, splitCookie: false), body: .init(buffer: .init()))
                    } catch {
                        return channel.eventLoop.makeFailedFuture(error)
                    }
                    guard let (headers, service) = route(request) else {
                        return channel.eventLoop.makeSucceededFuture(nil)
                    }
                    var responseHeaders = headers
                    let deflate = compression.flatMap {
                        PerMessageDeflateNegotiation.answer(offers: request.headers[values: .secWebSocketExtensions], settings: $0)
                    }
                    if let deflate { responseHeaders[.secWebSocketExtensions] = deflate.answer }
                    chosen.value = (service, deflate?.agreement)
                    return channel.eventLoop.makeSucceededFuture(HTTPHeaders(responseHeaders))
                },
                upgradePipelineHandler: { channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        guard let (service, deflate) = chosen.value else {
                            preconditionFailure("an upgrade always follows a chosen service")
                        }
                        try service.install(channel, deflate)
                        return .servedOnEventLoop
                    }
                }
            )
            let serverUpgradeConfiguration = NIOTypedHTTPServerUpgradeConfiguration(
                upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(HTTP1ToHTTPServerCodec(secure: secure))
                        try channel.pipeline.syncOperations.addHandlers(configuration.http1.additionalChannelHandlers())
                        try channel.pipeline.syncOperations.addHandler(
                            HTTPConnectionStateHandler(idleTimeout: configuration.http1.idleTimeout.map { .init($0) }, logger: logger)
                        )
                        let asyncChannel = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                            wrappingChannelSynchronously: channel,
                            configuration: .init(isOutboundHalfClosureEnabled: true)
                        )
                        return upgradeAttempted.value ? .failedUpgrade(asyncChannel, logger) : .notUpgraded(asyncChannel)
                    }
                }
            )
            var pipeline = NIOUpgradableHTTPServerPipelineConfiguration<UpgradeResult>(upgradeConfiguration: serverUpgradeConfiguration)
            pipeline.enablePipelining = false  // NIOAsyncChannel pipelines HTTP
            pipeline.enableErrorHandling = false  // Hummingbird answers errors
            pipeline.enableResponseHeaderValidation = false  // swift-http-types validates
            pipeline.decoderConfiguration.maxHeaderFieldSize = configuration.http1.httpDecoder.maxHeaderFieldSize
            pipeline.decoderConfiguration.maxHeaderListSize = configuration.http1.httpDecoder.maxHeaderListSize
            pipeline.decoderConfiguration.maxHeaderFieldCount = configuration.http1.httpDecoder.maxHeaderFieldCount
            let result = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(configuration: pipeline)
            return Value(upgradeResult: result, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.upgradeResult.get() {
            case .servedOnEventLoop:
                return
            case .notUpgraded(let http1):
                await handleHTTP(asyncChannel: http1, logger: logger)
            case .failedUpgrade(let http1, let logger):
                logger.debug("WebSocket upgrade refused")
                await refuseUpgrade(http1)
            }
        } catch let error as ChannelError where error == .inputClosed {
            logger.trace("the connection closed before its first request")
        } catch {
            logger.debug("connection setup failed", metadata: ["error": "\(error)"])
        }
    }

    /// A refused upgrade: 400, and the connection closes.
    private func refuseUpgrade(_ asyncChannel: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>) async {
        try? await asyncChannel.executeThenClose { _, outbound in
            let head = HTTPResponse(status: .badRequest, headerFields: [.connection: "close", .contentLength: "0"])
            try await outbound.write(contentsOf: [.head(head), .end(nil)])
        }
    }

    /// An upgrade asked for on a connection already serving HTTP cannot be carried out there
    /// (swift-nio upgrades only a connection's first request): redirect to the same URL and
    /// close, so the client asks again on a new connection, as hummingbird-websocket does.
    static func upgradeRedirecting(_ responder: @escaping HTTPChannelHandler.Responder) -> HTTPChannelHandler.Responder {
        struct RedirectClose: Error {}
        return { request, writer, channel in
            guard request.headers[.upgrade] == "websocket" else {
                return try await responder(request, writer, channel)
            }
            var path = request.uri.path
            if let query = request.uri.query { path += "?\(query)" }
            try await writer.writeResponse(HTTPResponse(status: .temporaryRedirect, headerFields: [.connection: "close", .location: path]))
            throw RedirectClose()
        }
    }
}
