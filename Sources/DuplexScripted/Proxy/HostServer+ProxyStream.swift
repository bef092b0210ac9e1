import Duplex
package import DuplexHost
import DuplexSchema
import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// SSE proxy routes: a client's stream request passed to the user's real backend, its events
/// through the `toClient` rules.
extension HostServer {
    /// An SSE proxy route's answer: the request (its method, headers but the hop's own,
    /// `Last-Event-ID`, and body) asked of the upstream first; its stream, each event through
    /// the rules; or its answer passed on when it is not a stream or not 2xx; or 502 when it
    /// could not be reached.
    package func proxyStream(_ route: ScriptedRoute, _ stream: StreamRequest, name: String, journal: ScriptJournal?) -> StreamAnswer {
        guard case .proxy(let proxy) = route.kind, proxy.script.isEventStream else {
            return .json(.internalServerError, RouteRefusal.errorBody("this route is not an SSE proxy"))
        }
        return proxyStream(proxy, stream, route: name, journal: journal)
    }

    /// An SSE proxy route's answer, named `route` in metrics and traces, journaled in `journal`
    /// when there is one (the recorder keeps none).
    func proxyStream(_ proxy: ProxyRouteState, _ stream: StreamRequest, route: String, journal: ScriptJournal?) -> StreamAnswer {
        let script = proxy.script
        let request = stream.request
        var scripted = Self.scriptedRequest(request)
        if request.method != .get {
            let data = Data(stream.body.readableBytesView)
            if let text = String(validating: data, as: UTF8.self) { scripted.body = text } else { scripted.bodyBase64 = data.base64EncodedString() }
        }
        if let journal, let refusal = refusal(proxy.refusals.next(), scripted, journal: journal) { return .respond(refusal) }
        guard let url = script.upstreamURL(path: request.uri.path, query: request.uri.query) else {
            return .json(.badRequest, RouteRefusal.errorBody("the upstream URL of this path cannot be made"))
        }
        let body = request.method == .get || stream.body.readableBytes == 0 ? nil : Data(stream.body.readableBytesView)
        var configuration = SSEConfiguration()
        configuration.tlsTrust = script.tlsTrust
        configuration.tlsIdentity = script.tlsIdentity
        if let httpVersion = script.httpVersion { configuration.httpVersion = httpVersion }
        let upstream = ServerSentEventManager(
            request: SSERequest(
                url: url, method: .init(request.method.rawValue), body: body,
                additionalHeaders: ForwardedHeaders.forwarded(request.headers.map { ($0.name.rawName, $0.value) })),
            retryPolicy: .none,
            configuration: configuration,
            lastEventID: scripted.lastEventID
        )
        let (headers, tracer) = (request.headers, activeTracer)
        let connection = journal?.newConnection() ?? 0
        let (path, asked) = (scripted.path, scripted)
        return .later(
            stream.eventLoop.makeFutureWithTask { () -> StreamAnswer in
                let events = upstream.events
                let states = upstream.stateEvents
                do {
                    try await upstream.connect()
                } catch {
                    await upstream.terminate()
                    let answer = Self.upstreamStreamRefusal(error)
                    journal?.append(
                        .init(
                            connection: connection, path: path, direction: .out, kind: .refused, data: answer.body, code: Int(answer.status.code),
                            request: asked, leg: .client, action: "the upstream \(url.absoluteString) answered so, or could not be reached"))
                    return .respond(answer)
                }
                journal?.append(.init(connection: connection, path: path, direction: .in, kind: .open, request: asked, leg: .client))
                let relay = ProxyEventRelay(
                    rules: script.toClient, breakpoints: proxy.breakpoints, journal: journal, tap: proxy.tap?(asked, nil, nil),
                    connection: connection, path: path, upstream: upstream)
                return .stream(
                    EventStream(
                        route: route,
                        headers: headers,
                        tracer: tracer,
                        scripted: true,
                        dropsAtEnd: { relay.drops },
                        start: { writer in
                            // The upstream client's events are read by a task of its own; once
                            // its stream is over, the events end too.
                            Task {
                                for await state in states {
                                    if case .disconnected = state { break }
                                }
                                await upstream.terminate()
                            }
                            Task { await relay.run(events, writer: writer) }
                            return { relay.clientLeft() }
                        },
                        abandon: { relay.clientLeft() }
                    )
                )
            })
    }

    /// The client's answer when the upstream's stream could not be opened: the upstream's own
    /// answer (its status, `Retry-After`, `Content-Type` and body) when it gave one, else 502
    /// saying why.
    static func upstreamStreamRefusal(_ error: any Error) -> RouteRefusal {
        guard let error = error as? SSEError else {
            return RouteRefusal(status: .badGateway, body: RouteRefusal.errorBody("the upstream could not be reached: \(error)"))
        }
        if let response = error.response, (100..<600).contains(response.status) {
            var headers = ForwardedHeaders.relayed(response.headers.map { ($0.name, $0.value) })
            if headers[.contentType] == nil { headers[.contentType] = "application/octet-stream" }
            return RouteRefusal(status: .init(code: response.status), headers: headers, body: response.text)
        }
        return RouteRefusal(status: .badGateway, body: RouteRefusal.errorBody("the upstream's stream could not be opened: \(error.message)"))
    }
}

/// Passes an upstream's events to the client through the route's `toClient` breakpoints and
/// rules, one at a time, in order: a breakpoint that matches an event's data holds it for the
/// test; then the first rule that matches it (its data, `nth` counting events) applies.
final class ProxyEventRelay: Sendable {
    private let rules: [ProxyRule]
    private let breakpoints: ProxyBreakpoints
    /// The events breakpoints hold: let go when the client leaves.
    private let heldEvents = NIOLockedValueBox<[HeldMessage]>([])
    private let journal: ScriptJournal?
    private let tap: (any ProxySessionTap)?
    private let connection: Int
    private let path: String
    private let upstream: ServerSentEventManager
    /// Whether a rule dropped the connection: the stream then ends with no final chunk.
    private let dropped = NIOLockedValueBox(false)

    init(
        rules: [ProxyRule], breakpoints: ProxyBreakpoints, journal: ScriptJournal?, tap: (any ProxySessionTap)?, connection: Int, path: String,
        upstream: ServerSentEventManager
    ) {
        self.rules = rules
        self.breakpoints = breakpoints
        self.journal = journal
        self.tap = tap
        self.connection = connection
        self.path = path
        self.upstream = upstream
    }

    var drops: Bool { dropped.withLockedValue { $0 } }

    /// Reads `events` until the upstream ends the stream, a rule ends it, or the client leaves.
    func run(_ events: AsyncStream<ServerSentEvent>, writer: EventStreamWriter) async {
        var number = 0
        var hangs = false
        reading: for await arrived in events {
            tap?.event(arrived)
            number += 1
            var (event, held) = (arrived, nil as String?)
            if breakpoints.watches(.toClient), let breakpoint = breakpoints.take(.toClient, .text(arrived.data)) {
                switch await hold(arrived, breakpoint, writer) {
                case .forward(let message):
                    event.data = message.text ?? arrived.data
                    held = event.data == arrived.data ? "the test forwarded it" : "the test replaced it with \(message.excerpt.debugDescription)"
                case .unanswered:
                    held = "unanswered after \(breakpoint.holdingAtMost), let go"
                case .drop:
                    note(arrived, direction: .in, leg: .upstream, action: "held at a breakpoint; the test dropped it")
                    continue reading
                case .connectionEnded:
                    note(arrived, direction: .in, leg: .upstream, action: "held at a breakpoint; the connection ended")
                    break reading
                }
            }
            let rule = rules.first { $0.match.matches(.text(event.data), number: number) }
            let action = rule.map { "\($0)" } ?? "forward"
            note(arrived, direction: .in, leg: .upstream, action: held.map { "held at a breakpoint; \($0); \(action)" } ?? action)
            guard let rule else {
                guard send(event, writer, as: "forwarded") else { break }
                continue
            }
            var outgoing = event
            var (copies, unchanged) = (1, nil as String?)
            for action in rule.actions {
                switch action.step {
                case .delay(let duration):
                    try? await Task.sleep(for: duration)
                case .replace(let message):
                    outgoing.data = message.text ?? String(decoding: message.data, as: UTF8.self)
                case .set(let fields):
                    if case .object(var members)? = JSONValue(outgoing.data) {
                        for (key, value) in fields { members[key] = value }
                        outgoing.data = JSONValue.object(members).jsonText
                    } else {
                        unchanged = "not a JSON object: forwarded unchanged"
                    }
                case .send(let message):
                    guard send(ServerSentEvent(data: message.text ?? ""), writer, as: "injected") else { break reading }
                case .reply, .forward:
                    break
                case .duplicate:
                    copies = 2
                case .close:
                    journal?.append(
                        .init(connection: connection, path: path, direction: .out, kind: .close, leg: .client, action: "a rule ended the stream"))
                    break reading
                case .drop:
                    dropped.withLockedValue { $0 = true }
                    journal?.append(.init(connection: connection, path: path, direction: .out, kind: .drop, leg: .client))
                    break reading
                case .cut:
                    // The first half of the event's bytes, then the connection goes: a cut inside
                    // a multi-byte character sends that character's first bytes, as a network would.
                    let text = (try? outgoing.encoded()) ?? ""
                    let half = Array(text.utf8.prefix(max(text.utf8.count / 2, 1)))
                    dropped.withLockedValue { $0 = true }
                    journal?.append(
                        .init(
                            connection: connection, path: path, direction: .out, kind: .drop, data: String(decoding: half, as: UTF8.self),
                            leg: .client, action: "cut in the middle of an event"))
                    writer.send(ByteBuffer(bytes: half))
                    break reading
                case .hang:
                    journal?.append(
                        .init(
                            connection: connection, path: path, direction: .out, kind: .drop, leg: .upstream,
                            action: "hang: the client's stream stays open, silent"))
                    hangs = true
                    break reading
                case .fragment, .fault, .answerPings:
                    // WebSocket only: refused by ProxyScript.validate() for an SSE route.
                    break
                }
            }
            guard !rule.actions.contains(.forward(false)) else { continue }
            for copy in 0..<copies {
                guard send(outgoing, writer, as: unchanged ?? (copy == 0 ? "forwarded" : "duplicate")) else { break reading }
            }
        }
        // The upstream ended its stream (when the client left first, the tap was told so).
        tap?.dropped(by: .upstream)
        // A stream that hangs stays open until the client leaves.
        if !hangs { writer.finish() }
        await upstream.terminate()
    }

    /// Holds `event` for the test that set `breakpoint`, until it answers, the breakpoint's limit
    /// passes, or the client leaves.
    private func hold(_ event: ServerSentEvent, _ breakpoint: ProxyBreakpoint, _ writer: EventStreamWriter) async -> HeldMessage.Release {
        let limit = breakpoint.holdingAtMost
        var timer: Task<Void, Never>?
        let outcome = await withCheckedContinuation { (continuation: CheckedContinuation<HeldMessage.Release, Never>) in
            let held = HeldMessage(
                message: .text(event.data), direction: .toClient, connection: connection,
                release: { continuation.resume(returning: $0) },
                inject: { [self] injected in _ = send(ServerSentEvent(data: injected.text ?? ""), writer, as: "injected at a breakpoint") })
            guard breakpoint.fire(held) else {
                held.settle(.forward(held.message))
                return
            }
            heldEvents.withLockedValue { $0.append(held) }
            timer = Task {
                try? await Task.sleep(for: limit)
                held.settle(.unanswered)
            }
        }
        timer?.cancel()
        heldEvents.withLockedValue { $0.removeAll { $0.isReleased } }
        return outcome
    }

    /// The client is gone: the upstream's stream goes too, and the events held for it are let go.
    func clientLeft() {
        for held in heldEvents.withLockedValue({ $0 }) { held.settle(.connectionEnded) }
        tap?.dropped(by: .client)
        let upstream = self.upstream
        Task { await upstream.terminate() }
    }

    /// Writes `event` to the client, journaled; false once the client's stream is closed.
    private func send(_ event: ServerSentEvent, _ writer: EventStreamWriter, as action: String) -> Bool {
        guard let text = try? event.encoded() else { return true }
        note(event, direction: .out, leg: .client, action: action)
        return writer.send(text)
    }

    private func note(_ event: ServerSentEvent, direction: ScriptJournal.Entry.Direction, leg: ScriptJournal.Entry.Leg, action: String) {
        journal?.append(
            .init(
                connection: connection, path: path, direction: direction, kind: .event, data: event.data, id: event.id, event: event.event,
                leg: leg, action: action))
    }
}
