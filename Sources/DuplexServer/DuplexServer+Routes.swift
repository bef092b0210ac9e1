import DuplexChat
import DuplexHost
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
    /// The server's route table: the scripted routes (``DuplexServerConfiguration/routes``)
    /// and their journal, then a replayed cassette's routes (then the built-in ones, with
    /// `ReplayConfiguration.builtInRoutes`), or a recording server's, or the built-in ones
    /// (``builtInRoutes()``); the first and the last with `/health`, `/metrics`
    /// and the chaos routes where they have none of their own. A recording server forwards
    /// every other path, `/_chaos/` included.
    func makeRouteTable() -> RouteTable {
        var table = RouteTable()
        table.add(host.scriptedRoutes(configuration.routes, journal: journal))
        if !configuration.routes.isEmpty { table.add(host.journalRoutes(journal)) }
        if let record = configuration.record, replayBook == nil {
            table.add(healthRoutes())
            table.add(host.recordRoutes(record))
            return table
        }
        if let replayBook {
            table.add(host.replayRoutes(replayBook))
            if replayBook.configuration.builtInRoutes { table.add(builtInRoutes()) }
        } else {
            table.add(builtInRoutes())
        }
        table.add(healthRoutes())
        table.add(chaosRoutes)
        return table
    }

    /// The routes of the loopback server. A request for a WebSocket path that does not ask to
    /// upgrade gets 426, or for a chat room with a bad room, name or since, 400 (503 past the
    /// room limit) with a JSON `error` body.
    func builtInRoutes() -> [RouteTable.Route] {
        [
            .get("/") { _, _ in DemoPage.response() },
            .stream("/metrics/live", name: "metrics-live") { request in self.liveMetricsStream(request) },
            .get("/tls-faults") { _, _ in self.tlsFaultsResponse() },
            .webSocket(
                "/echo", name: "echo", upgrade: { request, _ in self.echoService(for: request) }, plain: { _, _ in self.host.upgradeRequired() }),
            .webSocket(
                "/chat/:room",
                name: "chat",
                upgrade: { request, captures in self.chatService(for: request, room: captures["room"] ?? "") },
                plain: { request, context in
                    switch self.chatJoin(request, room: context.parameters.get("room") ?? "") {
                    case .failure(let refusal): self.host.counted(Response.json(status: refusal.status, refusal.frameJSON))
                    case .success: self.host.upgradeRequired()
                    }
                }
            ),
            .stream("/events", name: "events") { request in self.tickStream(request) },
            .stream("/chat/:room/events", name: "chat-events") { request in self.roomEventStream(request) },
        ]
    }

    /// The host's `/_chaos/` routes, on with ``DuplexServerConfiguration/chaos``, scoped by the
    /// names of the table's routes.
    var chaosRoutes: [RouteTable.Route] {
        host.chaosRoutes(enabled: configuration.chaos)
    }

    /// `GET /health`, `{"status":"ok","store":…}`, and `GET /metrics`.
    func healthRoutes() -> [RouteTable.Route] {
        [
            .get("/health") { _, _ in
                Response.json(status: .ok, #"{"status":"ok","store":\#(self.rooms.healthJSON),"http2":\#(self.metrics.http2.healthJSON)}"#)
            },
            .get("/metrics") { _, _ in self.metricsResponse() },
        ]
    }

    /// `GET /tls-faults`: each TLS fault's base URL, by name, in ``TLSFault`` order; 404 when
    /// the server runs without them.
    func tlsFaultsResponse() -> Response {
        let ports = tlsFaultPorts
        guard configuration.tls?.faults == true, !ports.isEmpty else {
            return Response.json(
                status: .notFound, #"{"error":"this server has no TLS fault listeners (duplex-server --tls-self-signed --tls-faults)"}"#)
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
        return Response.json(status: .ok, "{" + entries.joined(separator: ",") + "}")
    }

    /// `/echo`, decided and served on the connection's event loop, with no task; with
    /// ``DuplexServerConfiguration/echoFaults``, served as a scripted route that echoes, so that
    /// the faults apply to what it sends.
    func echoService(for request: Request) -> UpgradeAnswer {
        if configuration.echoFaults != WebSocketFaults() {
            let echo = ScriptedRoute.webSocket(
                "/echo",
                subprotocols: configuration.echoSubprotocols ?? HostServer.offeredSubprotocols(request),
                faults: configuration.echoFaults,
                onMessage: { message, socket in
                    switch message {
                    case .text(let text): try socket.send(text)
                    case .binary(let data): try socket.send(binary: data)
                    }
                }
            )
            return host.scriptedUpgrade(echo, request, name: "echo", journal: journal)
        }
        let requestHeaders = request.headers
        let headers = HostServer.selecting(from: HostServer.offeredSubprotocols(request), preferring: configuration.echoSubprotocols)
        return .accept(
            headers,
            WebSocketService { channel, deflate in
                let trace = ConnectionTrace(requestHeaders, route: "echo", tracer: self.host.activeTracer)
                try self.host.installEventLoopService(EchoService.shared, on: channel, deflate: deflate, trace: trace)
            }
        )
    }

    /// What a chat member's service needs of this server.
    var chatContext: ChatMemberService.Context {
        .init(metrics: metrics, chatMetrics: chatMetrics, logger: logger, limits: configuration.chatLimits, maxRooms: configuration.maxRooms)
    }

    /// A request to join `room`, validated (``ChatJoin/parse(room:limits:query:)``).
    func chatJoin(_ request: Request, room: String) -> Result<ChatJoin, ProtocolRefusal> {
        let query = request.uri.queryParameters
        return ChatJoin.parse(room: room, limits: configuration.chatLimits) { query.get($0).map { String($0) } }
    }

    /// `/chat/{room}` on any room store, decided and served on the connection's event loop: a
    /// join that fails validation is refused there too, with its error frame and close code.
    func chatService(for request: Request, room roomName: String) -> UpgradeAnswer {
        let requestHeaders = request.headers
        let join = chatJoin(request, room: roomName)
        let headers = HostServer.selecting(from: HostServer.offeredSubprotocols(request), preferring: [ChatProtocol.subprotocol])
        return .accept(
            headers,
            WebSocketService { channel, agreement in
                let trace = ConnectionTrace(requestHeaders, route: "chat", tracer: self.host.activeTracer)
                let drains = self.host.writerDrains.drains(for: channel.eventLoop)
                let writer = ChannelTextWriter(
                    channel: channel,
                    outlet: try RawFrameOutlet.install(on: channel),
                    drains: drains,
                    maxCount: self.configuration.outboundQueueLimit,
                    maxBytes: self.configuration.outboundQueueBytes,
                    deflate: agreement.map { WriterDeflate(agreement: $0, zlib: drains.zlib) }
                )
                let member = ChatMemberService(context: self.chatContext, store: self.rooms, join: join, room: roomName, writer: writer, trace: trace)
                try self.host.installEventLoopService(member, on: channel, deflate: agreement, trace: trace)
            }
        )
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
