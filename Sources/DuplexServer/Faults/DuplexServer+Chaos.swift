import DuplexHost
import DuplexSchema
import HTTPTypes
import Hummingbird
import Logging
import NIOCore

extension DuplexServer {
    /// The `/_chaos/` routes: the server's faults over HTTP, so a script can break a client's
    /// connection. They exist only when ``DuplexServerConfiguration/chaos`` is on, and answer
    /// only loopback peers (others get 403).
    ///
    /// - `POST /_chaos/drop[?route=R|room=N]`: drop connections, no close frame.
    /// - `POST /_chaos/close?code=C[&reason=T][&route=R|room=N]`: close with a code and reason
    ///   (at most 123 bytes of UTF-8; a longer one gets 400).
    /// - `POST /_chaos/stall?ms=M[&route=R|room=N]`: stop reading and writing for M ms.
    /// - `POST /_chaos/path-switch[?route=R|room=N]`: stop reading and writing the connections
    ///   open now for good, with no close, while new ones are served (``switchPath(_:)``).
    /// - `POST /_chaos/end-sse[?route=R|room=N]`: end SSE streams cleanly.
    /// - `POST /_chaos/refuse?ms=M`: answer new connections and upgrades with 503 for M ms.
    /// - `POST /_chaos/goaway`: send every HTTP/2 connection GOAWAY (no error, its last stream):
    ///   its streams run to their end, it takes no new one, and it then closes; `affected` counts
    ///   connections. It takes no scope: GOAWAY is the connection's, not a stream's.
    /// - `POST /_chaos/restart?ms=M[&amnesia=1]`: close every connection with 1001, stop listening,
    ///   and listen again on the same port M ms later (the answer is written first); with
    ///   `amnesia=1`, forget every chat room too, as a new process would.
    ///
    /// Each answers `{"affected":N}` (how many connections it reached), or 400 with the reason.
    /// They are served while the server refuses requests (`refuse`), so a script can lift it.
    func chaosRoutes() -> [RouteTable.Route] {
        let routes: [RouteTable.Route] = [
            .post("/_chaos/drop") { request, context in
                try self.chaos(request, context) { scope, _ in self.dropConnections(scope) }
            },
            .post("/_chaos/close") { request, context in
                try self.chaos(request, context) { scope, query in
                    guard let text = query["code"], let number = UInt16(text), WebSocketCloseCode(number).isSendable else {
                        throw ChaosError("code must be a close code that may be sent (1000-1003, 1007-1014, 3000-4999)")
                    }
                    let reason = query["reason"] ?? ""
                    guard reason.utf8.count <= Self.maxCloseReasonBytes else {
                        throw ChaosError(
                            "reason is \(reason.utf8.count) bytes; a close frame holds at most \(Self.maxCloseReasonBytes) bytes of reason")
                    }
                    return self.closeConnections(scope, code: WebSocketCloseCode(number), reason: reason)
                }
            },
            .post("/_chaos/stall") { request, context in
                try self.chaos(request, context) { scope, query in
                    self.stallConnections(scope, for: .milliseconds(try Self.milliseconds(query)))
                }
            },
            .post("/_chaos/path-switch") { request, context in
                try self.chaos(request, context) { scope, _ in self.switchPath(scope) }
            },
            .post("/_chaos/end-sse") { request, context in
                try self.chaos(request, context) { scope, _ in self.endEventStreams(scope) }
            },
            .post("/_chaos/restart") { request, context in
                // The restart is queued; a graceful shutdown lets this answer finish first.
                try self.chaos(request, context) { _, query in
                    let downtime = Duration.milliseconds(try Self.milliseconds(query))
                    let affected = self.connections.count
                    let amnesia = ["1", "true"].contains(query["amnesia"] ?? "")
                    self.restart(downFor: downtime, amnesia: amnesia)
                    return affected
                }
            },
            .post("/_chaos/goaway") { request, context in
                try self.chaos(request, context) { scope, _ in
                    guard scope == .all else { throw ChaosError("goaway takes no route or room: it is sent to every HTTP/2 connection") }
                    return self.goAwayHTTP2Connections()
                }
            },
            .post("/_chaos/refuse") { request, context in
                try self.chaos(request, context) { _, query in
                    self.refuseConnections(for: .milliseconds(try Self.milliseconds(query)))
                    return 0
                }
            },
        ]
        return routes.map { $0.servedWhileRefusing() }
    }

    struct ChaosError: Error {
        var message: String
        init(_ message: String) { self.message = message }
    }

    private static func milliseconds(_ query: [String: String]) throws -> Int64 {
        guard let text = query["ms"], let value = Int64(text), (1...3_600_000).contains(value) else {
            throw ChaosError("ms must be a number of milliseconds from 1 to 3600000")
        }
        return value
    }

    private func chaos(
        _ request: Request,
        _ context: DuplexRequestContext,
        _ apply: (FaultScope, [String: String]) throws -> Int
    ) throws -> Response {
        guard configuration.chaos else {
            return Response.json(status: .notFound, #"{"error":"chaos endpoints are off; start the server with --chaos"}"#)
        }
        guard Self.isLoopback(context.channel.remoteAddress) else {
            return Response.json(status: .forbidden, #"{"error":"chaos endpoints answer loopback peers only"}"#)
        }
        let query = Dictionary(request.uri.queryParameters.map { (String($0.key), String($0.value)) }, uniquingKeysWith: { first, _ in first })
        let scope: FaultScope
        if let room = query["room"] {
            scope = .room(room)
        } else if let route = query["route"] {
            guard ["echo", "chat", "events", "chat-events"].contains(route) else {
                return Response.json(status: .badRequest, #"{"error":"route must be echo, chat, events or chat-events"}"#)
            }
            scope = .route(route)
        } else {
            scope = .all
        }
        do {
            let affected = try apply(scope, query)
            metrics.injected(String(request.uri.path.split(separator: "/").last ?? ""))
            logger.notice("chaos", metadata: ["path": "\(request.uri.path)", "affected": "\(affected)"])
            return Response.json(status: .ok, #"{"affected":\#(affected)}"#)
        } catch let error as ChaosError {
            return Response.json(status: .badRequest, #"{"error":"\#(error.message)"}"#)
        }
    }

    /// Whether a peer is on the loopback network: 127.0.0.0/8 or ::1.
    static func isLoopback(_ address: SocketAddress?) -> Bool {
        guard let ip = address?.ipAddress else { return false }
        return ip.hasPrefix("127.") || ip == "::1" || ip.hasPrefix("::ffff:127.")
    }
}
