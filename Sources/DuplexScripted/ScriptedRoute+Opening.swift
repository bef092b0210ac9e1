package import DuplexHost
package import NIOCore

/// What a scripted WebSocket route answers a connection, decided from its request alone: the
/// server's upgrade (``HostServer``) and the simulated network of DuplexTesting both ask it.
package enum ScriptedOpening {
    /// The route refused it with this HTTP answer (journaled as `refused`).
    case refused(status: Int, headers: [String: String], body: String)
    /// The route serves it: the subprotocol it chose among those offered, if any, and the
    /// connection's service, to run in an ``EventLoopWebSocketHandler`` on `eventLoop`.
    case accepted(subprotocol: String?, service: any EventLoopWebSocketService)
}

extension ScriptedRoute {
    /// How the route answers `request` (its `subprotocols` the client's offer), served on
    /// `eventLoop` and journaled in `journal`, named `name` in metrics and fault scopes (the
    /// route's pattern by default); nil when it is not a scripted WebSocket route (an SSE or a
    /// proxy route).
    package func open(_ request: ScriptedRequest, journal: ScriptJournal, eventLoop: any EventLoop, name: String? = nil) -> ScriptedOpening? {
        guard case .webSocket(let handler) = kind else { return nil }
        return handler.open(request, journal: journal, eventLoop: eventLoop, name: name ?? path)
    }
}

extension WebSocketRouteHandler {
    /// See ``ScriptedRoute/open(_:journal:eventLoop:name:)``.
    func open(_ request: ScriptedRequest, journal: ScriptJournal, eventLoop: any EventLoop, name: String) -> ScriptedOpening {
        if case .refuse(let status, let headers, let body) = accept(request) {
            journal.append(
                .init(connection: journal.newConnection(), path: request.path, direction: .out, kind: .refused, code: status, request: request))
            return .refused(status: status, headers: headers, body: body)
        }
        let chosen = chosen(request)
        return .accepted(subprotocol: chosen.subprotocol, service: service(serving: chosen, journal: journal, eventLoop: eventLoop, name: name))
    }

    /// `request` with the subprotocol the route chose: the first of its own the client offered;
    /// none when it speaks none, or the client offered none of them.
    func chosen(_ request: ScriptedRequest) -> ScriptedRequest {
        var chosen = request
        chosen.subprotocol = subprotocols.first { request.subprotocols.contains($0) }
        return chosen
    }

    /// The service of one accepted connection, `request` as ``chosen(_:)`` made it.
    func service(serving request: ScriptedRequest, journal: ScriptJournal, eventLoop: any EventLoop, name: String) -> ScriptedWebSocketService {
        let socket = ScriptedWebSocket(
            request: request,
            connection: journal.newConnection(),
            journal: journal,
            faults: faults,
            answerPings: answerPings,
            eventLoop: eventLoop
        )
        return ScriptedWebSocketService(socket: socket, route: self, name: name)
    }
}

extension ScriptedRoute {
    /// Whether it serves WebSocket connections itself: a scripted WebSocket route or a preset,
    /// not an SSE route nor a proxy.
    package var isScriptedWebSocket: Bool {
        if case .webSocket = kind { true } else { false }
    }
}

extension ScriptedRequest {
    /// A WebSocket upgrade's request: `GET` at `path` with `query`, its header fields (names as
    /// sent) and the subprotocols it offers.
    package init(webSocketPath path: String, query: String?, headers: [(name: String, value: String)], subprotocols: [String]) {
        self.init(
            method: "GET",
            path: path,
            query: query,
            headers: headers.map { Header(name: $0.name, value: $0.value) },
            subprotocols: subprotocols
        )
    }
}
