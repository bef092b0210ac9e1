package import DuplexHost
import Foundation
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

    /// Whether it streams events itself: a scripted SSE route, not a proxy.
    package var isScriptedStream: Bool {
        if case .sse = kind { true } else { false }
    }
}

extension ScriptedRequest {
    /// A request as a route sees it: `method` at `path` with `query`, its header fields (names
    /// as sent), the subprotocols a WebSocket's offers, and an SSE request's body (as text when
    /// it is UTF-8, else in base64) and `Last-Event-ID` (taken from `headers`).
    package init(
        method: String, path: String, query: String?, headers: [(name: String, value: String)], subprotocols: [String] = [], body: [UInt8]? = nil
    ) {
        self.init(
            method: method,
            path: path,
            query: query,
            headers: headers.map { Header(name: $0.name, value: $0.value) },
            subprotocols: subprotocols
        )
        lastEventID = header("Last-Event-ID")
        if let body, !body.isEmpty {
            if let text = String(validating: body, as: UTF8.self) { self.body = text } else { bodyBase64 = Data(body).base64EncodedString() }
        }
    }
}

/// What a scripted SSE route answers a request, decided from the request alone: the server's
/// stream route (``HostServer``) and the simulated network of DuplexTesting both ask it.
package enum ScriptedStreamOpening {
    /// The route refused it with this HTTP answer (journaled as `refused`).
    case refused(status: Int, headers: [String: String], body: String)
    /// The route's script for it cannot be written: why (journaled as `error`); a server
    /// answers 500.
    case invalid(String)
    /// The route streams its script.
    case streaming(ScriptedStream)

    /// The JSON body of the 500 that answers an ``invalid(_:)`` script: the error is this
    /// library's own text (a place and a rule), with nothing from the request.
    package static func invalidBody(_ reason: String) -> String {
        #"{"error":"the route's script cannot be written: \#(reason)"}"#
    }
}

/// One accepted request's stream: its script, journaled from the request's opening on.
package struct ScriptedStream: Sendable {
    let script: SSEScript
    let lastEventID: String?
    let record: @Sendable (ScriptJournal.Entry.Kind, ScriptJournal.Entry.Direction, SSEScriptEvent?) -> Void

    /// Sets the script going on `writer`, from timers on `eventLoop`: its `retry:`, its events
    /// after the request's `Last-Event-ID`, its ending. Returns the feed: stop it when the stream
    /// ends (the client gone, a shutdown); its `drops` says whether the script dropped it.
    package func start(writer: EventStreamWriter, eventLoop: any EventLoop) -> ScriptedEventSource {
        let feed = ScriptedEventSource(script: script, lastEventID: lastEventID, writer: writer, eventLoop: eventLoop, record: record)
        feed.start()
        return feed
    }
}

extension ScriptedRoute {
    /// How the route answers `request`, journaled in `journal`; nil when it is not a scripted
    /// SSE route (a WebSocket or a proxy route).
    package func openStream(_ request: ScriptedRequest, journal: ScriptJournal) -> ScriptedStreamOpening? {
        guard case .sse(let handler) = kind else { return nil }
        if case .refuse(let status, let headers, let body) = handler.accept(request) {
            journal.append(
                .init(connection: journal.newConnection(), path: request.path, direction: .out, kind: .refused, code: status, request: request))
            return .refused(status: status, headers: headers, body: body)
        }
        switch handler.stream(for: request, journal: journal) {
        case .success(let stream): return .streaming(stream)
        case .failure(let invalid): return .invalid(invalid.reason)
        }
    }
}

/// Why a scripted SSE route's script cannot be written (``SSEScript/validate()``'s error).
struct InvalidStreamScript: Error {
    var reason: String
}

extension SSERouteHandler {
    /// The stream of an accepted `request`, its opening journaled; or why its script cannot be
    /// written, journaled.
    func stream(for request: ScriptedRequest, journal: ScriptJournal) -> Result<ScriptedStream, InvalidStreamScript> {
        let script = respond(request)
        let connection = journal.newConnection()
        do {
            try script.validate()
        } catch {
            journal.append(.init(connection: connection, path: request.path, direction: .out, kind: .error, data: "\(error)", request: request))
            return .failure(InvalidStreamScript(reason: "\(error)"))
        }
        let path = request.path
        journal.append(.init(connection: connection, path: path, direction: .in, kind: .open, request: request))
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
        return .success(ScriptedStream(script: script, lastEventID: request.lastEventID, record: record))
    }
}
