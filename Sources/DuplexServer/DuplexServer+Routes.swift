import DuplexSchema
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

extension DuplexServer {
    /// The HTTP routes. A request for a WebSocket path that does not ask to upgrade gets 426, or
    /// for a chat room with a bad room, name or since, 400 (503 past the room limit) with a JSON
    /// `error` body.
    func makeRouter() -> Router<DuplexRequestContext> {
        let router = Router(context: DuplexRequestContext.self)
        router.get("/") { _, _ -> Response in
            DemoPage.response()
        }
        router.get("health") { _, _ -> Response in
            Self.json(status: .ok, #"{"status":"ok","store":\#(self.rooms.healthJSON)}"#)
        }
        router.get("echo") { _, _ -> Response in
            Self.upgradeRequired()
        }
        router.get("chat/:room") { request, context -> Response in
            switch self.chatJoin(request, context) {
            case .failure(let refusal): refusal.response
            case .success: Self.upgradeRequired()
            }
        }
        router.get("events") { request, context -> Response in
            self.tickStream(request, context)
        }
        router.get("chat/:room/events") { request, context -> Response in
            self.roomEventStream(request, context)
        }
        router.get("\(Self.refusedPath.dropFirst())/:status") { _, context -> Response in
            let status = context.parameters.get("status").flatMap { Int($0) } ?? 400
            let known: [Int: String] = [
                408: "the request head did not arrive within the request head timeout",
                414: "the request line is too long",
                431: "the request head is too large or has too many fields",
            ]
            var response = Self.json(status: .init(code: (400..<600).contains(status) ? status : 400), #"{"error":"\#(known[status] ?? "the request was refused")"}"#)
            response.headers[.connection] = "close"
            return response
        }
        addChaosRoutes(to: router)
        return router
    }

    /// Where ``ConnectionGuard`` sends a refused request that follows others on a keep-alive
    /// connection, so that its answer comes after theirs.
    static let refusedPath = "/.duplex-refused"

    /// The WebSocket routes, tried for every request that asks to upgrade. A route accepts with
    /// ``DuplexRequestContext/upgrade(_:to:)``; any other answer refuses the upgrade (400).
    func makeWebSocketRouter() -> Router<DuplexRequestContext> {
        let router = Router(context: DuplexRequestContext.self)
        // `/echo` never gets here, nor a valid join to an in-memory room: DuplexChildChannel asks
        // quickService(for:) first.
        router.get("chat/:room") { request, context -> Response in
            let headers = Self.selecting(from: Self.offeredSubprotocols(request), preferring: [ChatProtocol.subprotocol])
            switch self.chatJoin(request, context) {
            case .success(let join):
                return context.upgrade(headers, to: .task { inbound, outbound, context in
                    try await self.serveChat(join, inbound: inbound, outbound: outbound, channel: context.channel, outlet: context.outlet, extensionsAnswer: context.extensionsAnswer)
                })
            case .failure(let refusal):
                // swift-nio answers a refused upgrade with a bare 400, which loses the reason, so
                // the upgrade is accepted and the refusal sent as an error frame and close code.
                return context.upgrade(headers, to: .task { _, outbound, _ in
                    try await outbound.write(.text(refusal.frameJSON))
                    let code: WebSocketCloseCode = refusal.status == .serviceUnavailable ? .tryAgainLater : .policyViolation
                    try await outbound.close(code.nio, reason: String(refusal.error.code.rawValue.prefix(123)))
                })
            }
        }
        return router
    }

    /// The WebSocket routes decided and served on the event loop, with no task: `/echo`, and
    /// `/chat/{room}` with a valid join when the rooms are in memory. Nil hands the request to
    /// the WebSocket router (a refused chat join, whose answer it sends, or the PostgreSQL
    /// store, whose calls wait on the database).
    func quickService(for request: Request) -> (HTTPFields, WebSocketService)? {
        let path = request.uri.path
        if path == "/echo" {
            let headers = Self.selecting(from: Self.offeredSubprotocols(request), preferring: configuration.echoSubprotocols)
            return (headers, .eventLoop { channel, answer in try self.installEventLoopService(EchoService.shared, on: channel, extensionsAnswer: answer) })
        }
        guard path.hasPrefix("/chat/"), let rooms = rooms as? ChatRooms else { return nil }
        let roomName = path.dropFirst("/chat/".count)
        guard !roomName.contains("/"), case .success(let join) = chatJoin(request, room: String(roomName)) else { return nil }
        let headers = Self.selecting(from: Self.offeredSubprotocols(request), preferring: [ChatProtocol.subprotocol])
        return (headers, .eventLoop { channel, answer in
            let agreement = self.deflateAgreement(answer)
            let drains = self.writerDrains.drains(for: channel.eventLoop)
            let writer = ChannelTextWriter(
                channel: channel,
                outlet: try RawFrameOutlet.install(on: channel),
                drains: drains,
                maxCount: self.configuration.outboundQueueLimit,
                maxBytes: self.configuration.outboundQueueBytes,
                deflate: agreement.map { WriterDeflate(agreement: $0, zlib: drains.zlib) }
            )
            try self.installEventLoopService(ChatMemberService(server: self, rooms: rooms, join: join, writer: writer), on: channel, extensionsAnswer: answer)
        })
    }

    /// Routes an upgrade request through the WebSocket router: the service a route chose, or nil.
    func webSocketService(
        for request: Request,
        channel: any Channel,
        logger: Logger,
        responder: some HTTPResponder<DuplexRequestContext>
    ) async -> (HTTPFields, WebSocketService)? {
        let context = DuplexRequestContext(source: .init(channel: channel, logger: logger))
        guard let response = try? await responder.respond(to: request, context: context), response.status == .ok else { return nil }
        return context.webSocketService.withLockedValue { $0 }
    }

    /// Serves `service` on `channel`'s event loop (``EventLoopWebSocketHandler``), with
    /// permessage-deflate as `extensionsAnswer` agreed it.
    func installEventLoopService(_ service: any EventLoopWebSocketService, on channel: any Channel, extensionsAnswer: String?) throws {
        let handler = EventLoopWebSocketHandler(
            configuration: .init(maxMessageBytes: configuration.maxMessageBytes, closeTimeout: configuration.closeTimeout),
            registry: connections,
            service: service,
            deflate: deflateAgreement(extensionsAnswer).map { DeflateContext(agreement: $0, zlib: writerDrains.drains(for: channel.eventLoop).zlib) }
        )
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(handler)
        // The front door's work ends with the upgrade: the handler checks frames itself (masking
        // included), and every read and write of the connection then skips one handler.
        if let guardHandler = try? pipeline.handler(type: ConnectionGuard.self) {
            pipeline.removeHandler(guardHandler, promise: nil)
        }
    }

    /// The permessage-deflate agreement the server's `Sec-WebSocket-Extensions` answer states.
    func deflateAgreement(_ extensionsAnswer: String?) -> ServerDeflateAgreement? {
        extensionsAnswer.flatMap { ServerDeflateAgreement(answer: $0, minimumBytes: configuration.compression?.minimumBytes ?? 0) }
    }

    /// The subprotocols a request offers in `Sec-WebSocket-Protocol`, in its order (every field,
    /// comma-separated values, blanks dropped).
    static func offeredSubprotocols(_ request: Request) -> [String] {
        request.headers[values: .secWebSocketProtocol]
            .flatMap { $0.split(separator: ",") }
            .map { String($0.drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed()) }
            .filter { !$0.isEmpty }
    }

    /// The response header that selects a subprotocol: with `preferring` nil, the client's
    /// first; else the first of `preferring` the client offered. None when nothing matches or
    /// nothing was offered (a browser then fails the connection, as RFC 6455 says it must only
    /// when the server picks one it did not offer).
    static func selecting(from offered: [String], preferring: [String]?) -> HTTPFields {
        let chosen = preferring.map { list in list.first { offered.contains($0) } } ?? offered.first
        guard let chosen else { return [:] }
        return [.secWebSocketProtocol: chosen]
    }

    /// A request refused before any upgrade or stream.
    struct Refusal: Error {
        var status: HTTPResponse.Status
        var error: ChatProtocolError

        var frameJSON: String {
            (try? ChatServerFrame.error(ChatErrorFrame(error)).jsonString()) ?? #"{"type":"error","v":1}"#
        }

        var response: Response {
            DuplexServer.json(status: status, frameJSON)
        }
    }

    static func json(status: HTTPResponse.Status, _ body: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }

    static func upgradeRequired() -> Response {
        var response = json(status: .upgradeRequired, #"{"error":"this route speaks WebSocket: send an Upgrade: websocket request"}"#)
        response.headers[.upgrade] = "websocket"
        return response
    }
}

extension WebSocketCloseCode {
    /// The code as swift-nio's type.
    var nio: WebSocketErrorCode { WebSocketErrorCode(codeNumber: Int(rawValue)) }
}
