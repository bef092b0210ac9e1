package import DuplexHost
import DuplexSchema
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore

extension HostServer {
    /// The routes of a server that replays a cassette: its SSE paths, for each method recorded
    /// there, and its WebSocket paths (426 without an upgrade). The table adds `/health`,
    /// `/metrics` and the chaos routes where the cassette has no session; any other path is 404.
    package func replayRoutes(_ book: ReplayBook) -> [RouteTable.Route] {
        var routes: [RouteTable.Route] = []
        for path in book.paths(.eventStream) {
            for method in book.methods(at: path) {
                routes.append(
                    .stream(path, name: "replay", method: HTTPRequest.Method(method) ?? .get) { request in self.replayStream(book, request) })
            }
        }
        // A path recorded both ways answers a plain GET with its stream (a stream route at a
        // WebSocket route's path takes its requests without an upgrade).
        for path in book.paths(.webSocket) {
            routes.append(
                .webSocket(
                    path, name: "replay", upgrade: { request, _ in self.replayWebSocketService(book, for: request) },
                    plain: { _, _ in self.upgradeRequired() })
            )
        }
        return routes
    }

    /// A replayed WebSocket session, the next one recorded at the request's path, with the
    /// recorded subprotocol when the client offers it. Refused (400) where none is left.
    func replayWebSocketService(_ book: ReplayBook, for request: Request) -> UpgradeAnswer {
        guard let (number, session) = book.take(.webSocket, path: request.uri.path) else {
            return .refuse(RouteRefusal(status: .badRequest, body: #"{"error":"the cassette has no more WebSocket sessions at this path"}"#))
        }
        let requestHeaders = request.headers
        var headers = HTTPFields()
        if let subprotocol = session.subprotocol, Self.offeredSubprotocols(request).contains(subprotocol) {
            headers[.secWebSocketProtocol] = subprotocol
        }
        return .accept(
            headers,
            WebSocketService { channel, deflate in
                let trace = ConnectionTrace(requestHeaders, route: "replay", tracer: self.activeTracer)
                let service = ReplayWebSocketService(session: session, number: number, replay: book.configuration, logger: self.logger)
                try self.installEventLoopService(service, on: channel, deflate: deflate, trace: trace)
            }
        )
    }

    /// A replayed SSE session, the next one recorded at the request's path, resuming after the
    /// request's `Last-Event-ID` when the recording has that id. In strict mode the request's
    /// method and body must be the recorded ones (the body compared by the matcher): a request
    /// that differs is reported as a mismatch at step 0 and answered 400 with both sides.
    func replayStream(_ book: ReplayBook, _ stream: StreamRequest) -> StreamAnswer {
        let request = stream.request
        guard let (number, session) = book.take(.eventStream, path: request.uri.path) else {
            return .json(.notFound, #"{"error":"the cassette has no SSE session at this path"}"#)
        }
        if book.configuration.strict {
            let body = stream.body
            let received = body.readableBytes == 0 ? nil : Data(body.readableBytesView)
            if let mismatch = Self.requestMismatch(
                session, number: number, method: request.method.rawValue, body: received, matcher: book.configuration.matcher)
            {
                logger.error(
                    "replay mismatch",
                    metadata: [
                        "session": "\(number)", "path": "\(session.path)", "step": "0", "recorded": "\(mismatch.recorded)",
                        "received": "\(mismatch.received)",
                    ])
                book.configuration.onMismatch?(mismatch)
                let reason = (try? JSONEncoder().encode(["error": mismatch.description])).map { String(decoding: $0, as: UTF8.self) }
                return .json(.badRequest, reason ?? "{}")
            }
        }
        let lastEventID = request.headers[HTTPField.Name("Last-Event-ID")!]
        let replay = book.configuration
        let eventLoop = stream.eventLoop
        return .stream(
            EventStream(route: "replay", headers: request.headers, tracer: activeTracer) { writer in
                ReplayEventSource(session: session, lastEventID: lastEventID, replay: replay, writer: writer, eventLoop: eventLoop).stop
            })
    }

    /// How a request differs from the one `session` recorded, or nil when it does not.
    static func requestMismatch(
        _ session: Cassette.Session,
        number: Int,
        method: String,
        body: Data?,
        matcher: ReplayMatcher
    ) -> ReplayMismatch? {
        let recordedMethod = session.method ?? "GET"
        func show(_ method: String, _ body: Data?) -> String {
            guard let body else { return "request \(method) with no body" }
            return "request \(method) with body "
                + ReplayMismatch.show(String(validating: body, as: UTF8.self).map(Cassette.Message.text) ?? .binary(body)).dropFirst("client ".count)
        }
        let sameBody: Bool =
            switch (session.body, body) {
            case (nil, nil): true
            case (let recorded?, let received?):
                matcher.matches(
                    String(validating: recorded, as: UTF8.self).map(Cassette.Message.text) ?? .binary(recorded),
                    String(validating: received, as: UTF8.self).map(Cassette.Message.text) ?? .binary(received)
                )
            default: false
            }
        guard method != recordedMethod || !sameBody else { return nil }
        return ReplayMismatch(
            session: number,
            path: session.path,
            step: 0,
            recorded: show(recordedMethod, session.body),
            received: show(method, body)
        )
    }
}
