package import DuplexHost
import Duplex
import DuplexSchema
import DuplexScripted
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOCore

extension HostServer {
    /// The routes of a recording server: a WebSocket upgrade at any path is forwarded, and so is
    /// every `GET` without one and every `POST`, `PUT`, `PATCH` and `DELETE`, as an SSE stream,
    /// each through a proxy route that records (``recordingProxy(_:eventStream:)``). The server
    /// adds its own `/health` and `/metrics` first.
    package func recordRoutes(_ record: RecordConfiguration) -> [RouteTable.Route] {
        let webSocket = Self.recordingProxy(record, eventStream: false)
        let events = Self.recordingProxy(record, eventStream: true)
        let stream: RouteTable.Stream = { request in self.proxyStream(events, request, name: "record", journal: nil) }
        return [
            .webSocket(
                "/**", name: "record", upgrade: { request, _ in self.proxyUpgrade(webSocket, request, name: "record", journal: nil) },
                plain: { _, _ in self.upgradeRequired() }),
            .stream("/**", name: "record", method: .get, stream),
            .stream("/**", name: "record", method: .post, stream),
            .stream("/**", name: "record", method: .put, stream),
            .stream("/**", name: "record", method: .patch, stream),
            .stream("/**", name: "record", method: .delete, stream),
        ]
    }

    /// A recording proxy route for every path, its path and query appended to the upstream's,
    /// with no rules and a tap that records each session into the cassette as it happens: the
    /// request with its secrets replaced (an SSE request's method and body too), the subprotocol
    /// and extensions the upstream agreed to, every message each way or every event with its time,
    /// and how it ended. The upstream is asked first, so a client is answered as the upstream
    /// answered (502 when it cannot be reached, and nothing is recorded).
    static func recordingProxy(_ record: RecordConfiguration, eventStream: Bool) -> ScriptedRoute {
        var script = ProxyScript(upstream: record.upstream(webSocket: !eventStream), tlsTrust: record.tlsTrust)
        script.appendsPath = true
        return .proxy("/**", script: script) { request, subprotocol, extensions in
            let headers = record.recorded(request.headers.map { ($0.name, $0.value) })
            var session: Cassette.Session
            if eventStream {
                let body = request.body.map { Data($0.utf8) } ?? request.bodyBase64.flatMap { Data(base64Encoded: $0) }
                session = Cassette.Session(
                    kind: .eventStream, path: request.path, query: request.query, headers: headers,
                    method: request.method == "GET" ? nil : request.method, body: body.flatMap { $0.isEmpty ? nil : $0 })
            } else {
                session = Cassette.Session(kind: .webSocket, path: request.path, query: request.query, headers: headers)
                session.subprotocol = subprotocol
                session.extensions = extensions
            }
            return CassetteTap(record.recorder.begin(session, at: .now))
        }
    }
}
