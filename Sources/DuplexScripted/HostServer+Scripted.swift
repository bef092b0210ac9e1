package import DuplexHost
import DuplexSchema
import Foundation
import HTTPTypes
package import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// Scripted routes as a route set of the host: a server adds them to its table beside its own,
/// and their journal's routes.
extension HostServer {
    /// `routes` as route-table entries, each named in metrics and traces by its pattern; what
    /// they serve and receive goes to `journal`.
    package func scriptedRoutes(_ routes: [ScriptedRoute], journal: ScriptJournal) -> [RouteTable.Route] {
        routes.map { route in
            switch route.kind {
            case .webSocket(let handler):
                .webSocket(
                    route.path,
                    name: route.path,
                    upgrade: { request, _ in self.scriptedUpgrade(handler, request, route: route.path, journal: journal) },
                    plain: { request, _ in
                        // A preset refuses what its protocol refuses (Socket.IO's long polling)
                        // as its server would; any other route asks for the upgrade.
                        guard route.preset != nil,
                            let refusal = self.refusal(handler.accept(Self.scriptedRequest(request)), Self.scriptedRequest(request), journal: journal)
                        else { return self.upgradeRequired() }
                        var headers = refusal.headers
                        if headers[.contentType] == nil { headers[.contentType] = "application/json" }
                        return Response(status: refusal.status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: refusal.body)))
                    }
                )
            case .sse(let handler):
                .stream(route.path, name: route.path, method: HTTPRequest.Method(route.method) ?? .get) { request in
                    self.scriptedStream(handler, request, route: route.path, journal: journal)
                }
            case .proxy(let proxy) where proxy.script.isEventStream:
                .stream(route.path, name: route.path, method: HTTPRequest.Method(route.method) ?? .get) { request in
                    self.proxyStream(proxy, request, route: route.path, journal: journal)
                }
            case .proxy(let proxy):
                .webSocket(
                    route.path,
                    name: route.path,
                    upgrade: { request, _ in self.proxyUpgrade(proxy, request, route: route.path, journal: journal) },
                    plain: { _, _ in self.upgradeRequired() }
                )
            }
        }
    }

    /// `GET /_journal` (the journal as a JSON array) and `DELETE /_journal` (empties it), for
    /// loopback peers.
    package func journalRoutes(_ journal: ScriptJournal) -> [RouteTable.Route] {
        [
            .get("/_journal") { _, context in
                guard Self.isLoopback(context.channel.remoteAddress) else { return Self.journalForbidden }
                var headers = HTTPFields()
                headers[.contentType] = "application/json; charset=utf-8"
                // Entries let go past the journal's limits are counted, not hidden.
                headers[HTTPField.Name("Duplex-Journal-Dropped")!] = String(journal.droppedCount)
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: journal.json())))
            },
            .on(.delete, "/_journal") { _, context in
                guard Self.isLoopback(context.channel.remoteAddress) else { return Self.journalForbidden }
                journal.removeAll()
                return Response(status: .noContent)
            },
        ]
    }

    private static var journalForbidden: Response {
        Response.json(status: .forbidden, #"{"error":"the journal answers loopback peers only"}"#)
    }

    // MARK: Serving

    /// The request as a scripted route sees it.
    static func scriptedRequest(_ request: Request, subprotocols: [String] = []) -> ScriptedRequest {
        ScriptedRequest(
            method: request.method.rawValue,
            path: request.uri.path,
            query: request.uri.query,
            headers: request.headers.map { .init(name: $0.name.rawName, value: $0.value) },
            subprotocols: subprotocols,
            lastEventID: request.headers[HTTPField.Name("Last-Event-ID")!]
        )
    }

    /// A refusal a handler decided, journaled, as the front door sends it.
    func refusal(_ decision: UpgradeDecision, _ request: ScriptedRequest, journal: ScriptJournal) -> RouteRefusal? {
        guard case .refuse(let status, let headers, let body) = decision else { return nil }
        journal.append(
            .init(connection: journal.newConnection(), path: request.path, direction: .out, kind: .refused, code: status, request: request))
        var fields = HTTPFields()
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) {
            if let name = HTTPField.Name(name) { fields[name] = value }
        }
        metrics.refused(status: status)
        return RouteRefusal(status: .init(code: (400..<600).contains(status) ? status : 500), headers: fields, body: body)
    }

    /// `route`'s answer to a WebSocket upgrade at another path (the server's `/echo` with
    /// faults), named `name` in metrics and traces; an SSE route refuses it with 500.
    package func scriptedUpgrade(_ route: ScriptedRoute, _ request: Request, name: String, journal: ScriptJournal) -> UpgradeAnswer {
        switch route.kind {
        case .webSocket(let handler): scriptedUpgrade(handler, request, route: name, journal: journal)
        case .proxy(let proxy): proxyUpgrade(proxy, request, route: name, journal: journal)
        case .sse: .refuse(RouteRefusal(status: .internalServerError, body: #"{"error":"an SSE route takes no WebSocket upgrade"}"#))
        }
    }

    /// A scripted WebSocket upgrade: refused as its handler decides, or served on the event loop.
    /// `route` names it in metrics and traces: a scripted route's pattern, or `echo`.
    func scriptedUpgrade(_ handler: WebSocketRouteHandler, _ request: Request, route: String, journal: ScriptJournal) -> UpgradeAnswer {
        let scripted = Self.scriptedRequest(request, subprotocols: Self.offeredSubprotocols(request))
        if let refusal = refusal(handler.accept(scripted), scripted, journal: journal) { return .refuse(refusal) }
        let chosen = handler.chosen(scripted)
        let headers: HTTPFields = chosen.subprotocol.map { [.secWebSocketProtocol: $0] } ?? [:]
        return .accept(
            headers,
            WebSocketService { channel, deflate in
                let service = handler.service(serving: chosen, journal: journal, eventLoop: channel.eventLoop, name: route)
                let trace = ConnectionTrace(request.headers, route: route, tracer: self.activeTracer)
                try self.installEventLoopService(service, on: channel, deflate: deflate, trace: trace)
            }
        )
    }

    /// A scripted SSE stream: the request's body (read within the message limit) given to its
    /// handler, refused as the handler decides, or its script streamed. `route` (its pattern)
    /// names it in metrics and traces.
    func scriptedStream(_ handler: SSERouteHandler, _ stream: StreamRequest, route: String, journal: ScriptJournal) -> StreamAnswer {
        let request = stream.request
        var scripted = Self.scriptedRequest(request)
        if request.method != .get {
            let data = Data(stream.body.readableBytesView)
            if let text = String(validating: data, as: UTF8.self) { scripted.body = text } else { scripted.bodyBase64 = data.base64EncodedString() }
        }
        if let refusal = refusal(handler.accept(scripted), scripted, journal: journal) { return .respond(refusal) }
        let opened: ScriptedStream
        switch handler.stream(for: scripted, journal: journal) {
        case .success(let stream): opened = stream
        case .failure(let invalid):
            return .json(.internalServerError, ScriptedStreamOpening.invalidBody(invalid.reason))
        }
        let source = NIOLockedValueBox<ScriptedEventSource?>(nil)
        let eventLoop = stream.eventLoop
        return .stream(
            EventStream(
                route: route,
                headers: request.headers,
                tracer: activeTracer,
                scripted: true,
                dropsAtEnd: { source.withLockedValue { $0?.drops ?? false } }
            ) { writer in
                let feed = opened.start(writer: writer, eventLoop: eventLoop)
                source.withLockedValue { $0 = feed }
                return feed.stop
            })
    }
}
