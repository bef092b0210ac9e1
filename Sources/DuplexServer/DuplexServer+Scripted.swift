import DuplexHost
import DuplexSchema
import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

extension DuplexServer {
    /// The scripted routes (``DuplexServerConfiguration/routes``) as route-table entries.
    func scriptedRoutes() -> [RouteTable.Route] {
        configuration.routes.map { route in
            switch route.kind {
            case .webSocket(let handler):
                .webSocket(
                    route.path,
                    upgrade: { request, _ in self.scriptedUpgrade(handler, request, route: route.path) },
                    plain: { _, _ in self.host.upgradeRequired() }
                )
            case .sse(let handler):
                .stream(route.path, method: HTTPRequest.Method(route.method) ?? .get) { request in
                    self.scriptedStream(handler, request, route: route.path)
                }
            }
        }
    }

    /// `GET /_journal` (the journal as a JSON array) and `DELETE /_journal` (empties it), for
    /// loopback peers; served when the server has scripted routes.
    func journalRoutes() -> [RouteTable.Route] {
        guard !configuration.routes.isEmpty else { return [] }
        return [
            .get("/_journal") { _, context in
                guard HostServer.isLoopback(context.channel.remoteAddress) else { return Self.journalForbidden }
                var headers = HTTPFields()
                headers[.contentType] = "application/json; charset=utf-8"
                // Entries let go past the journal's limits are counted, not hidden.
                headers[HTTPField.Name("Duplex-Journal-Dropped")!] = String(self.journal.droppedCount)
                return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: self.journal.json())))
            },
            .on(.delete, "/_journal") { _, context in
                guard HostServer.isLoopback(context.channel.remoteAddress) else { return Self.journalForbidden }
                self.journal.removeAll()
                return Response(status: .noContent)
            },
        ]
    }

    private static var journalForbidden: Response {
        Response.json(status: .forbidden, #"{"error":"the journal answers loopback peers only"}"#)
    }

    /// Refuses scripted routes (``DuplexServerConfiguration/routes``) that clash with a built-in
    /// route (the same method, and a path the built-in pattern matches) or with each other, and
    /// those whose path or method no route can have. ``run()`` checks this before it listens;
    /// call it to check a configuration without starting a server.
    /// - Throws: ``DuplexServerError/invalidRoutes(_:)`` saying which route and why.
    public func validateRoutes() throws(DuplexServerError) {
        var builtIn = RouteTable()
        builtIn.add(builtInRoutes())
        builtIn.add(healthRoutes())
        builtIn.add(chaosRoutes)
        builtIn.add([.get("/_journal") { _, _ in Response(status: .ok) }])
        var seen: [(method: String, pattern: RoutePattern)] = []
        for (index, route) in configuration.routes.enumerated() {
            let place = "routes[\(index)] (\(route))"
            guard route.path.hasPrefix("/"), !route.path.contains("?"), !route.path.contains("#") else {
                throw .invalidRoutes("\(place): a path starts with / and has no query or fragment")
            }
            guard HTTPRequest.Method(route.method) != nil, !["HEAD", "CONNECT", "TRACE", "OPTIONS"].contains(route.method) else {
                throw .invalidRoutes("\(place): \(route.method.debugDescription) is not a method a route can serve")
            }
            let pattern = RoutePattern(route.path)
            let probe = route.path.replacingOccurrences(of: "/:", with: "/x").replacingOccurrences(of: "*", with: "x")
            for existing in builtIn.routes where existing.method.rawValue == route.method && existing.pattern.match(probe) != nil {
                throw .invalidRoutes("\(place) clashes with the built-in route \(existing.method.rawValue) \(existing.pattern): choose another path")
            }
            do {
                try route.sseScript?.validate()
            } catch {
                throw .invalidRoutes("\(place): \(error)")
            }
            if seen.contains(where: { $0.method == route.method && $0.pattern == pattern }) {
                throw .invalidRoutes("\(place): another scripted route has the same method and path")
            }
            seen.append((route.method, pattern))
        }
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
    func refusal(_ decision: UpgradeDecision, _ request: ScriptedRequest) -> RouteRefusal? {
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

    /// A scripted WebSocket upgrade: refused as its handler decides, or served on the event loop.
    /// `route` names it in metrics and traces: a scripted route's pattern, or `echo`.
    func scriptedUpgrade(_ handler: WebSocketRouteHandler, _ request: Request, route: String) -> UpgradeAnswer {
        let offered = HostServer.offeredSubprotocols(request)
        var scripted = Self.scriptedRequest(request, subprotocols: offered)
        if let refusal = refusal(handler.accept(scripted), scripted) { return .refuse(refusal) }
        let headers = handler.subprotocols.isEmpty ? [:] : HostServer.selecting(from: offered, preferring: handler.subprotocols)
        scripted.subprotocol = headers[.secWebSocketProtocol]
        let chosen = scripted
        return .accept(
            headers,
            WebSocketService { channel, deflate in
                let socket = ScriptedWebSocket(
                    request: chosen,
                    connection: self.journal.newConnection(),
                    journal: self.journal,
                    faults: handler.faults,
                    answerPings: handler.answerPings,
                    eventLoop: channel.eventLoop
                )
                let trace = ConnectionTrace(request.headers, route: route, tracer: self.host.activeTracer)
                try self.host.installEventLoopService(
                    ScriptedWebSocketService(socket: socket, route: handler, name: route), on: channel, deflate: deflate, trace: trace)
            }
        )
    }

    /// A scripted SSE stream: the request's body (read within the message limit) given to its
    /// handler, refused as the handler decides, or its script streamed. `route` (its pattern)
    /// names it in metrics and traces.
    func scriptedStream(_ handler: SSERouteHandler, _ stream: StreamRequest, route: String) -> StreamAnswer {
        let request = stream.request
        var scripted = Self.scriptedRequest(request)
        if request.method != .get {
            let data = Data(stream.body.readableBytesView)
            if let text = String(validating: data, as: UTF8.self) { scripted.body = text } else { scripted.bodyBase64 = data.base64EncodedString() }
        }
        if let refusal = refusal(handler.accept(scripted), scripted) { return .respond(refusal) }
        let script = handler.respond(scripted)
        let connection = journal.newConnection()
        do {
            try script.validate()
        } catch {
            journal.append(.init(connection: connection, path: scripted.path, direction: .out, kind: .error, data: "\(error)", request: scripted))
            // The error is this library's own text (a place and a rule), with nothing from the request.
            return .json(.internalServerError, #"{"error":"the route's script cannot be written: \#(error)"}"#)
        }
        let journal = self.journal
        let path = scripted.path
        journal.append(.init(connection: connection, path: path, direction: .in, kind: .open, request: scripted))
        let record: @Sendable (ScriptJournal.Entry.Kind, ScriptJournal.Entry.Direction, SSEScriptEvent?) -> Void = { kind, direction, event in
            journal.append(
                .init(
                    connection: connection,
                    path: path,
                    direction: direction,
                    kind: event.map { $0.raw != nil || $0.comment != nil ? .text : .event } ?? kind,
                    data: event.map { $0.raw ?? $0.comment ?? $0.data ?? "" },
                    id: event?.id,
                    event: event?.event
                )
            )
        }
        let source = NIOLockedValueBox<ScriptedEventSource?>(nil)
        let lastEventID = scripted.lastEventID
        let eventLoop = stream.eventLoop
        return .stream(
            EventStream(
                route: route,
                headers: request.headers,
                tracer: host.activeTracer,
                scripted: true,
                dropsAtEnd: { source.withLockedValue { $0?.drops ?? false } }
            ) { writer in
                let feed = ScriptedEventSource(script: script, lastEventID: lastEventID, writer: writer, eventLoop: eventLoop, record: record)
                source.withLockedValue { $0 = feed }
                feed.start()
                return feed.stop
            })
    }
}
