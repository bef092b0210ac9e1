import DuplexWire
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
        router.add(middleware: RequestTracingMiddleware { [weak self] in self?.activeTracer })
        if let replayBook {
            addReplayRoutes(replayBook, to: router)
            return router
        }
        if let record = configuration.record {
            addRecordRoutes(record, to: router)
            return router
        }
        router.get("/") { _, _ -> Response in
            DemoPage.response()
        }
        router.get("metrics") { _, _ -> Response in
            self.metricsResponse()
        }
        router.get("metrics/live") { request, context -> Response in
            self.liveMetricsStream(request, context)
        }
        addHealthRoute(to: router)
        router.get("tls-faults") { _, _ -> Response in
            self.tlsFaultsResponse()
        }
        router.get("echo") { _, _ -> Response in
            self.upgradeRequired()
        }
        router.get("chat/:room") { request, context -> Response in
            switch self.chatJoin(request, context) {
            case .failure(let refusal): self.counted(refusal.response)
            case .success: self.upgradeRequired()
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

    /// `GET /health`: `{"status":"ok","store":…}`.
    func addHealthRoute(to router: Router<DuplexRequestContext>) {
        router.get("health") { _, _ -> Response in
            Self.json(status: .ok, #"{"status":"ok","store":\#(self.rooms.healthJSON),"http2":\#(self.metrics.http2.healthJSON)}"#)
        }
    }

    /// `GET /tls-faults`: each TLS fault's base URL, by name, in ``TLSFault`` order; 404 when
    /// the server runs without them.
    func tlsFaultsResponse() -> Response {
        let ports = tlsFaultPorts
        guard configuration.tls?.faults == true, !ports.isEmpty else {
            return Self.json(status: .notFound, #"{"error":"this server has no TLS fault listeners (duplex-server --tls-self-signed --tls-faults)"}"#)
        }
        let host: String =
            switch configuration.host {
            case "0.0.0.0": "127.0.0.1"
            case "::": "[::1]"
            case let host where host.contains(":"): "[\(host)]"
            case let host: host
            }
        let entries = TLSFault.allCases.compactMap { fault in
            ports[fault].map { #""\#(fault.rawValue)":"https://\#(host):\#($0)""# }
        }
        return Self.json(status: .ok, "{" + entries.joined(separator: ",") + "}")
    }

    /// Where ``ConnectionGuard`` sends a refused request that follows others on a keep-alive
    /// connection, so that its answer comes after theirs.
    static let refusedPath = "/.duplex-refused"

    /// The WebSocket routes, decided and served on the connection's event loop, with no task:
    /// `/echo`, and `/chat/{room}` on any room store (a join that fails validation is refused
    /// there too, with its error frame and close code). Nil refuses the upgrade (400).
    func webSocketService(for request: Request) -> (HTTPFields, WebSocketService)? {
        let path = request.uri.path
        let requestHeaders = request.headers
        if let replayBook { return replayWebSocketService(replayBook, for: request) }
        if let record = configuration.record { return recordWebSocketService(record, for: request) }
        if path == "/echo" {
            let headers = Self.selecting(from: Self.offeredSubprotocols(request), preferring: configuration.echoSubprotocols)
            return (
                headers,
                WebSocketService { channel, deflate in
                    let trace = ConnectionTrace(requestHeaders, route: "echo", tracer: self.activeTracer)
                    try self.installEventLoopService(EchoService.shared, on: channel, deflate: deflate, trace: trace)
                }
            )
        }
        guard path.hasPrefix("/chat/") else { return nil }
        let roomName = String(path.dropFirst("/chat/".count))
        guard !roomName.isEmpty, !roomName.contains("/") else { return nil }
        let join = chatJoin(request, room: roomName)
        let headers = Self.selecting(from: Self.offeredSubprotocols(request), preferring: [ChatProtocol.subprotocol])
        return (
            headers,
            WebSocketService { channel, agreement in
                let trace = ConnectionTrace(requestHeaders, route: "chat", tracer: self.activeTracer)
                let drains = self.writerDrains.drains(for: channel.eventLoop)
                let writer = ChannelTextWriter(
                    channel: channel,
                    outlet: try RawFrameOutlet.install(on: channel),
                    drains: drains,
                    maxCount: self.configuration.outboundQueueLimit,
                    maxBytes: self.configuration.outboundQueueBytes,
                    deflate: agreement.map { WriterDeflate(agreement: $0, zlib: drains.zlib) }
                )
                let member = ChatMemberService(server: self, store: self.rooms, join: join, room: roomName, writer: writer, trace: trace)
                try self.installEventLoopService(member, on: channel, deflate: agreement, trace: trace)
            }
        )
    }

    /// Serves `service` on `channel`'s event loop (``EventLoopWebSocketHandler``), with
    /// permessage-deflate as the handshake agreed it (`deflate`), logging with the client's
    /// `trace`.
    func installEventLoopService(_ service: any EventLoopWebSocketService, on channel: any Channel, deflate: DeflateAgreement?, trace: ConnectionTrace?) throws {
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

    func upgradeRequired() -> Response {
        var response = Self.json(status: .upgradeRequired, #"{"error":"this route speaks WebSocket: send an Upgrade: websocket request"}"#)
        response.headers[.upgrade] = "websocket"
        return counted(response)
    }

    /// Counts a refusal (``ServerMetrics/refused(status:)``) and returns it.
    func counted(_ refusal: Response) -> Response {
        metrics.refused(status: refusal.status.code)
        return refusal
    }

    /// `GET /metrics`: the server's metrics in Prometheus' text exposition format (version
    /// 0.0.4), as ``ServerMetrics`` keeps them.
    func metricsResponse() -> Response {
        let body = metrics.exposition()
        return Response(
            status: .ok,
            headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(bytes: body))
        )
    }
}

extension WebSocketCloseCode {
    /// The code as swift-nio's type.
    var nio: WebSocketErrorCode { WebSocketErrorCode(codeNumber: Int(rawValue)) }
}
