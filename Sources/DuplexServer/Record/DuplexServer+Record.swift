import Duplex
import DuplexSchema
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import NIOCore

extension DuplexServer {
    /// The routes of a recording server: a WebSocket upgrade at any path is forwarded
    /// (``recordWebSocketService(_:for:)``), and so is every `GET` without one and every
    /// `POST`, `PUT`, `PATCH` and `DELETE`, as an SSE stream (``recordStream(_:_:_:)``). The
    /// table serves `/health` and `/metrics` itself.
    func recordRoutes(_ record: RecordConfiguration) -> [RouteTable.Route] {
        let stream: RouteTable.Handler = { request, context in await self.recordStream(record, request, context) }
        return healthRoutes() + [
            .webSocket("/**", upgrade: { request, _ in self.recordWebSocketService(record, for: request) }, plain: stream),
            .on(.post, "/**", stream),
            .on(.put, "/**", stream),
            .on(.patch, "/**", stream),
            .on(.delete, "/**", stream),
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
    /// be reached, or answers anything but a stream, is 502 with the reason; a body over the
    /// server's message limit is 413.
    func recordStream(_ record: RecordConfiguration, _ request: Request, _ context: DuplexRequestContext) async -> Response {
        let fields = Self.fields(of: request)
        guard let url = record.url(path: request.uri.path, query: request.uri.query, webSocket: false) else {
            return Self.json(status: .badRequest, #"{"error":"the upstream URL of this path cannot be made"}"#)
        }
        let method = request.method == .get ? nil : request.method.rawValue
        var body: Data?
        if method != nil {
            do {
                let bytes = try await request.body.collect(upTo: self.configuration.maxMessageBytes)
                body = bytes.readableBytes == 0 ? nil : Data(bytes.readableBytesView)
            } catch {
                return Self.json(status: .contentTooLarge, #"{"error":"the request body is over the server's message limit (--max-message-bytes)"}"#)
            }
        }
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
        let events = upstream.events
        let states = upstream.stateEvents
        do {
            try await upstream.connect()
        } catch {
            await upstream.terminate()
            let reason = (try? JSONEncoder().encode(["error": "the recorded server's stream could not be opened: \(error)"])).map {
                String(decoding: $0, as: UTF8.self)
            }
            return Self.json(status: .badGateway, reason ?? "{}")
        }
        let recording = record.recorder.begin(
            Cassette.Session(
                kind: .eventStream, path: request.uri.path, query: request.uri.query, headers: record.recorded(fields), method: method, body: body),
            at: start
        )
        return EventStreamResponse(server: self).response(
            info: .init(kind: .eventStream, route: "record"),
            channel: context.channel,
            trace: ConnectionTrace(request.headers, route: "record", tracer: activeTracer)
        ) { sink in
            // Once the upstream's stream is over, its events stream is ended too: every event
            // it delivered is read first.
            Task {
                for await state in states {
                    if case .disconnected = state { break }
                }
                await upstream.terminate()
            }
            Task {
                for await event in events {
                    recording.record(.event(event))
                    guard EventStreamResponse.yield((try? event.encoded()) ?? "", to: sink) else { break }
                }
                // The upstream ended the stream; when the client left first, that was recorded.
                recording.record(.disconnect(.server))
                sink.finish()
            }
            return {
                recording.record(.disconnect(.client))
                Task { await upstream.terminate() }
            }
        }
    }
}
