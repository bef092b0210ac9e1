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
    /// The routes of a recording server: a WebSocket upgrade at any path is forwarded
    /// (``recordingProxy(_:)``), and so is every `GET` without one and every
    /// `POST`, `PUT`, `PATCH` and `DELETE`, as an SSE stream (``recordStream(_:_:)``). The
    /// server adds its own `/health` and `/metrics` first.
    package func recordRoutes(_ record: RecordConfiguration) -> [RouteTable.Route] {
        let stream: RouteTable.Stream = { request in self.recordStream(record, request) }
        let proxy = Self.recordingProxy(record)
        return [
            .webSocket(
                "/**", name: "record", upgrade: { request, _ in self.proxyUpgrade(proxy, request, name: "record", journal: nil) },
                plain: { _, _ in self.upgradeRequired() }),
            .stream("/**", name: "record", method: .get, stream),
            .stream("/**", name: "record", method: .post, stream),
            .stream("/**", name: "record", method: .put, stream),
            .stream("/**", name: "record", method: .patch, stream),
            .stream("/**", name: "record", method: .delete, stream),
        ]
    }

    /// The request's header fields, in order.
    static func fields(of request: Request) -> [(name: String, value: String)] {
        request.headers.map { ($0.name.rawName, $0.value) }
    }

    /// The recorder's WebSocket side: a proxy route for every path, its path and query appended
    /// to the upstream's, no rules, and a tap that records each session into the cassette as it
    /// happens (the request with its secrets replaced, the subprotocol and extensions the
    /// upstream agreed to, every message each way with its time, how it ended). The upstream is
    /// asked first, so a client is answered as the upstream answered (502 when it cannot be
    /// reached, and nothing is recorded).
    static func recordingProxy(_ record: RecordConfiguration) -> ScriptedRoute {
        var script = ProxyScript(upstream: record.webSocketUpstream, tlsTrust: record.tlsTrust)
        script.appendsPath = true
        return .proxy("/**", script: script) { request, subprotocol, extensions in
            var session = Cassette.Session(
                kind: .webSocket, path: request.path, query: request.query, headers: record.recorded(request.headers.map { ($0.name, $0.value) }))
            session.subprotocol = subprotocol
            session.extensions = extensions
            return CassetteTap(record.recorder.begin(session, at: .now))
        }
    }

    /// Any path: the upstream's SSE stream at the same path and query, for the same method and
    /// body (with the client's `Last-Event-ID`), forwarded and recorded. An upstream that cannot
    /// be reached, or answers anything but a stream, is 502 with the reason.
    func recordStream(_ record: RecordConfiguration, _ stream: StreamRequest) -> StreamAnswer {
        let request = stream.request
        let fields = Self.fields(of: request)
        guard let url = record.url(path: request.uri.path, query: request.uri.query, webSocket: false) else {
            return .json(.badRequest, #"{"error":"the upstream URL of this path cannot be made"}"#)
        }
        let method = request.method == .get ? nil : request.method.rawValue
        let body = method == nil || stream.body.readableBytes == 0 ? nil : Data(stream.body.readableBytesView)
        let start = ContinuousClock.now
        var configuration = SSEConfiguration()
        configuration.tlsTrust = record.tlsTrust
        let upstream = ServerSentEventManager(
            request: SSERequest(
                url: url, method: .init(request.method.rawValue), body: body, additionalHeaders: RecordConfiguration.forwarded(fields)),
            retryPolicy: .none,
            configuration: configuration,
            lastEventID: request.headers[HTTPField.Name("Last-Event-ID")!]
        )
        let (headers, tracer) = (request.headers, activeTracer)
        let session = Cassette.Session(
            kind: .eventStream, path: request.uri.path, query: request.uri.query, headers: record.recorded(fields), method: method, body: body)
        // The upstream's stream opens first: the client's answer is the upstream's.
        return .later(
            stream.eventLoop.makeFutureWithTask { () -> StreamAnswer in
                let events = upstream.events
                let states = upstream.stateEvents
                do {
                    try await upstream.connect()
                } catch {
                    await upstream.terminate()
                    let reason = (try? JSONEncoder().encode(["error": "the recorded server's stream could not be opened: \(error)"])).map {
                        String(decoding: $0, as: UTF8.self)
                    }
                    return .json(.badGateway, reason ?? "{}")
                }
                let recording = record.recorder.begin(session, at: start)
                return .stream(
                    EventStream(
                        route: "record",
                        headers: headers,
                        tracer: tracer,
                        start: { writer in
                            // The upstream client's events are read by a task of its own (the
                            // client's API is async); once its stream is over, the events end too.
                            Task {
                                for await state in states {
                                    if case .disconnected = state { break }
                                }
                                await upstream.terminate()
                            }
                            Task {
                                for await event in events {
                                    recording.record(.event(event))
                                    guard writer.send((try? event.encoded()) ?? "") else { break }
                                }
                                // The upstream ended the stream; when the client left first, that was recorded.
                                recording.record(.disconnect(.server))
                                writer.finish()
                            }
                            return {
                                recording.record(.disconnect(.client))
                                Task { await upstream.terminate() }
                            }
                        },
                        abandon: {
                            recording.record(.disconnect(.client))
                            Task { await upstream.terminate() }
                        }
                    )
                )
            })
    }
}
