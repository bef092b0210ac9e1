package import DuplexHost
import Duplex
import DuplexSchema
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOCore

extension HostServer {
    /// The routes of a recording server: a WebSocket upgrade at any path is forwarded
    /// (``recordWebSocketService(_:for:)``), and so is every `GET` without one and every
    /// `POST`, `PUT`, `PATCH` and `DELETE`, as an SSE stream (``recordStream(_:_:)``). The
    /// server adds its own `/health` and `/metrics` first.
    package func recordRoutes(_ record: RecordConfiguration) -> [RouteTable.Route] {
        let stream: RouteTable.Stream = { request in self.recordStream(record, request) }
        return [
            .webSocket(
                "/**", name: "record", upgrade: { request, _ in self.recordWebSocketService(record, for: request) },
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

    /// A WebSocket upgrade, forwarded to the upstream and recorded; the client is answered with
    /// the first subprotocol it offers. Refused (400) when the upstream URL cannot be made.
    func recordWebSocketService(_ record: RecordConfiguration, for request: Request) -> UpgradeAnswer {
        let fields = Self.fields(of: request)
        let offered = Self.offeredSubprotocols(request)
        guard let url = record.url(path: request.uri.path, query: request.uri.query, webSocket: true) else { return .refuse(.noRoute) }
        let session = Cassette.Session(kind: .webSocket, path: request.uri.path, query: request.uri.query, headers: record.recorded(fields))
        var configuration = WebSocketConfiguration()
        configuration.tlsTrust = record.tlsTrust
        configuration.maxMessageBytes = self.configuration.maxMessageBytes
        // The recorder passes messages on: it needs no deep buffer, and a shallow one makes a
        // client that does not read hold the upstream back soon.
        configuration.streamBufferLimit = 256
        configuration.streamBufferBytes = 1024 * 1024
        // A client that offers compression has the upstream offered it too: what the upstream
        // agrees to is recorded.
        if request.headers[values: .secWebSocketExtensions].contains(where: { $0.contains("permessage-deflate") }) {
            configuration.compression = PerMessageDeflate()
        }
        let upstream = WebSocket(
            request: WebSocketRequest(url: url, protocols: offered, additionalHeaders: RecordConfiguration.forwarded(fields)),
            configuration: configuration
        )
        let requestHeaders = request.headers
        return .accept(
            Self.selecting(from: offered, preferring: nil),
            WebSocketService { channel, deflate in
                let trace = ConnectionTrace(requestHeaders, route: "record", tracer: self.activeTracer)
                let service = RecordingWebSocketService(upstream: upstream, session: session, recorder: record.recorder, logger: self.logger)
                try self.installEventLoopService(service, on: channel, deflate: deflate, trace: trace)
            }
        )
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
