package import DuplexSchema
import Hummingbird
package import NIOCore
import Logging

/// Which live connections a fault applies to: all, one route's (``ConnectionInfo/route``), or
/// one room's (``ConnectionInfo/room``).
package enum ConnectionScope: Hashable, Sendable {
    case all
    case route(String)
    case room(String)

    package func matches(_ info: ConnectionInfo) -> Bool {
        switch self {
        case .all: true
        case .route(let name): info.route == name
        case .room(let name): info.room == name
        }
    }
}

/// The faults every server on the host can inject, on the connections it serves at the moment
/// of the call, and the `/_chaos/` routes that inject them over HTTP.
extension HostServer {
    /// Drops the connections in `scope`: no close frame, no end of stream (over HTTP/2 the
    /// stream is reset). - Returns: how many it reached.
    package func dropConnections(_ scope: ConnectionScope) -> Int {
        connections.send(.drop, matching: scope.matches)
    }

    /// Stops reading and writing the connections in `scope` for `duration`.
    package func stallConnections(_ scope: ConnectionScope, for duration: Duration) -> Int {
        connections.send(.stall(duration), matching: scope.matches)
    }

    /// Stops reading and writing the connections in `scope` for good, with no close, while new
    /// ones are served: the path to their clients went dead.
    package func switchPath(_ scope: ConnectionScope) -> Int {
        connections.send(.stall(.seconds(366 * 86_400)), matching: scope.matches)
    }

    /// Ends the SSE streams in `scope` cleanly.
    package func endEventStreams(_ scope: ConnectionScope) -> Int {
        connections.send(.close(.normalClosure, ""), matching: { $0.kind == .eventStream && scope.matches($0) })
    }

    /// Closes the WebSockets in `scope` with `code` and `reason` (cut to
    /// ``maxCloseReasonBytes`` at a character boundary), and ends the SSE streams in it.
    package func closeConnections(_ scope: ConnectionScope, code: WebSocketCloseCode, reason: String) -> Int {
        connections.send(.close(code, Self.closeReason(reason)), matching: scope.matches)
    }

    /// The longest close reason, in bytes of UTF-8: a close frame's 125 bytes less the code's 2.
    package static let maxCloseReasonBytes = 123

    /// `reason` cut to ``maxCloseReasonBytes`` at a character boundary.
    package static func closeReason(_ reason: String) -> String {
        guard reason.utf8.count > maxCloseReasonBytes else { return reason }
        var cut = ""
        for character in reason {
            guard cut.utf8.count + character.utf8.count <= maxCloseReasonBytes else { break }
            cut.append(character)
        }
        return cut
    }

    /// The `/_chaos/` routes: the host's faults over HTTP, so a script can break a client's
    /// connection. Only with `enabled` (else 404), and only for loopback peers (others get 403).
    /// A `route=` scope must name one of the WebSocket or stream routes of the table served
    /// (``routeNames``).
    ///
    /// - `POST /_chaos/drop[?route=R|room=N]`: drop connections, no close frame.
    /// - `POST /_chaos/close?code=C[&reason=T][&route=R|room=N]`: close with a code and reason
    ///   (at most 123 bytes of UTF-8; a longer one gets 400).
    /// - `POST /_chaos/stall?ms=M[&route=R|room=N]`: stop reading and writing for M ms.
    /// - `POST /_chaos/path-switch[?route=R|room=N]`: stop reading and writing the connections
    ///   open now for good, with no close, while new ones are served.
    /// - `POST /_chaos/end-sse[?route=R|room=N]`: end SSE streams cleanly.
    /// - `POST /_chaos/refuse?ms=M`: answer new connections and upgrades with 503 for M ms.
    /// - `POST /_chaos/goaway`: send every HTTP/2 connection GOAWAY (no error, its last stream).
    /// - `POST /_chaos/restart?ms=M[&amnesia=1]`: close every connection with 1001, stop listening,
    ///   and listen again on the same port M ms later (the answer is written first); with
    ///   `amnesia=1`, the server forgets what it holds too (chat rooms), as a new process would.
    ///
    /// Each answers `{"affected":N}` (how many connections it reached), or 400 with the reason.
    /// They are served while the server refuses requests (`refuse`), so a script can lift it.
    package func chaosRoutes(enabled: Bool) -> [RouteTable.Route] {
        ChaosFault.allCases.map { fault in
            RouteTable.Route.post(fault.path) { request, context in
                self.chaos(enabled, fault, request, context) { (scope, query) throws(ChaosError) in
                    try self.inject(fault, scope, query)
                }
            }.servedWhileRefusing()
        }
    }

    /// Carries out `fault` on `scope` as its query says; how many connections it reached.
    private func inject(_ fault: ChaosFault, _ scope: ConnectionScope, _ query: [String: String]) throws(ChaosError) -> Int {
        switch fault {
        case .drop:
            return dropConnections(scope)
        case .close:
            guard let text = query["code"], let number = UInt16(text), WebSocketCloseCode(number).isSendable else {
                throw ChaosError("code must be a close code that may be sent (1000-1003, 1007-1014, 3000-4999)")
            }
            let reason = query["reason"] ?? ""
            guard reason.utf8.count <= Self.maxCloseReasonBytes else {
                throw ChaosError("reason is \(reason.utf8.count) bytes; a close frame holds at most \(Self.maxCloseReasonBytes) bytes of reason")
            }
            return closeConnections(scope, code: WebSocketCloseCode(number), reason: reason)
        case .stall:
            return stallConnections(scope, for: .milliseconds(try Self.milliseconds(query)))
        case .pathSwitch:
            return switchPath(scope)
        case .endSSE:
            return endEventStreams(scope)
        case .refuse:
            refusal.refuse(for: .milliseconds(try Self.milliseconds(query)))
            return 0
        case .restart:
            // The restart is queued; a graceful shutdown lets this answer finish first.
            let downtime = Duration.milliseconds(try Self.milliseconds(query))
            let affected = connections.count
            restart(downFor: downtime, amnesia: ["1", "true"].contains(query["amnesia"] ?? ""))
            return affected
        case .goaway:
            guard scope == .all else { throw ChaosError("goaway takes no route or room: it is sent to every HTTP/2 connection") }
            return http2Connections.goAway()
        }
    }

    private struct ChaosError: Error {
        var message: String
        init(_ message: String) { self.message = message }
    }

    private static func milliseconds(_ query: [String: String]) throws(ChaosError) -> Int64 {
        guard let text = query["ms"], let value = Int64(text), (1...3_600_000).contains(value) else {
            throw ChaosError("ms must be a number of milliseconds from 1 to 3600000")
        }
        return value
    }

    private func chaos(
        _ enabled: Bool,
        _ fault: ChaosFault,
        _ request: Request,
        _ context: DuplexRequestContext,
        _ apply: (ConnectionScope, [String: String]) throws(ChaosError) -> Int
    ) -> Response {
        guard enabled else {
            return Response.json(status: .notFound, #"{"error":"chaos endpoints are off; start the server with --chaos"}"#)
        }
        guard Self.isLoopback(context.channel.remoteAddress) else {
            return Response.json(status: .forbidden, #"{"error":"chaos endpoints answer loopback peers only"}"#)
        }
        let query = Dictionary(request.uri.queryParameters.map { (String($0.key), String($0.value)) }, uniquingKeysWith: { first, _ in first })
        let scope: ConnectionScope
        if let room = query["room"] {
            scope = .room(room)
        } else if let route = query["route"] {
            let routeNames = self.routeNames
            guard routeNames.contains(route) else {
                let names = routeNames.dropLast().joined(separator: ", ") + (routeNames.count > 1 ? " or " : "") + (routeNames.last ?? "")
                return Response.json(status: .badRequest, #"{"error":"route must be \#(names)"}"#)
            }
            scope = .route(route)
        } else {
            scope = .all
        }
        do {
            let affected = try apply(scope, query)
            metrics.injected(fault)
            logger.notice("chaos", metadata: ["path": "\(request.uri.path)", "affected": "\(affected)"])
            return Response.json(status: .ok, #"{"affected":\#(affected)}"#)
        } catch {
            return Response.json(status: .badRequest, #"{"error":"\#(error.message)"}"#)
        }
    }

    /// Whether a peer is on the loopback network: 127.0.0.0/8 or ::1.
    package static func isLoopback(_ address: SocketAddress?) -> Bool {
        guard let ip = address?.ipAddress else { return false }
        return ip.hasPrefix("127.") || ip == "::1" || ip.hasPrefix("::ffff:127.")
    }
}
