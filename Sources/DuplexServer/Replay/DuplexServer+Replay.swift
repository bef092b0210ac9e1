import DuplexSchema
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOCore

extension DuplexServer {
    /// The routes of a server that replays a cassette: its SSE paths, its WebSocket paths (426
    /// without an upgrade), and `/health`, `/metrics` and the chaos routes where the cassette has
    /// no session. Any other path is 404.
    func addReplayRoutes(_ book: ReplayBook, to router: Router<DuplexRequestContext>) {
        let streams = book.paths(.eventStream)
        for path in streams {
            router.get(RouterPath(path)) { request, context -> Response in
                self.replayStream(book, request, context)
            }
        }
        for path in book.paths(.webSocket) where !streams.contains(path) {
            router.get(RouterPath(path)) { _, _ -> Response in
                self.upgradeRequired()
            }
        }
        let recorded = Set(streams + book.paths(.webSocket))
        if !recorded.contains("/health") { addHealthRoute(to: router) }
        if !recorded.contains("/metrics") {
            router.get("metrics") { _, _ -> Response in self.metricsResponse() }
        }
        addChaosRoutes(to: router)
    }

    /// A replayed WebSocket session, the next one recorded at the request's path, with the
    /// recorded subprotocol when the client offers it. Nil (400) where none was recorded.
    func replayWebSocketService(_ book: ReplayBook, for request: Request) -> (HTTPFields, WebSocketService)? {
        guard let (number, session) = book.take(.webSocket, path: request.uri.path) else { return nil }
        let requestHeaders = request.headers
        var headers = HTTPFields()
        if let subprotocol = session.subprotocol, Self.offeredSubprotocols(request).contains(subprotocol) {
            headers[.secWebSocketProtocol] = subprotocol
        }
        return (
            headers,
            WebSocketService { channel, deflate in
                let trace = ConnectionTrace(requestHeaders, route: "replay", tracer: self.activeTracer)
                let service = ReplayWebSocketService(session: session, number: number, replay: book.configuration, logger: self.logger)
                try self.installEventLoopService(service, on: channel, deflate: deflate, trace: trace)
            }
        )
    }

    /// A replayed SSE session, the next one recorded at the request's path, resuming after the
    /// request's `Last-Event-ID` when the recording has that id.
    func replayStream(_ book: ReplayBook, _ request: Request, _ context: DuplexRequestContext) -> Response {
        guard let (_, session) = book.take(.eventStream, path: request.uri.path) else {
            return Self.json(status: .notFound, #"{"error":"the cassette has no SSE session at this path"}"#)
        }
        let lastEventID = request.headers[HTTPField.Name("Last-Event-ID")!]
        let replay = book.configuration
        let eventLoop = context.channel.eventLoop
        return EventStreamResponse(server: self).response(
            info: .init(kind: .eventStream, route: "replay"),
            channel: context.channel,
            trace: ConnectionTrace(request.headers, route: "replay", tracer: activeTracer)
        ) { sink in
            let source = ReplayEventSource(session: session, lastEventID: lastEventID, replay: replay, sink: sink, eventLoop: eventLoop)
            return source.stop
        }
    }
}
