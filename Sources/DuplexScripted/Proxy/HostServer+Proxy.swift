import Duplex
package import DuplexHost
import DuplexSchema
import Foundation
import HTTPTypes
package import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// Proxy routes: a client's WebSocket passed to the user's real backend, through rules.
extension HostServer {
    /// `route`'s answer to a WebSocket upgrade, named `name` in metrics and traces, journaled in
    /// `journal` when there is one (the recorder keeps none); a route that is not a proxy
    /// refuses with 500.
    package func proxyUpgrade(_ route: ScriptedRoute, _ request: Request, name: String, journal: ScriptJournal?) -> UpgradeAnswer {
        guard case .proxy(let proxy) = route.kind else {
            return .refuse(RouteRefusal(status: .internalServerError, body: #"{"error":"this route is not a proxy"}"#))
        }
        return proxyUpgrade(proxy, request, route: name, journal: journal)
    }

    /// A proxy route's answer to an upgrade: refused as its script's refusal says; else the
    /// upstream's handshake first, then the client is answered as the upstream was (its
    /// subprotocol, or its refusal), or with 502 when it could not be reached.
    func proxyUpgrade(_ proxy: ProxyRouteState, _ request: Request, route: String, journal: ScriptJournal?) -> UpgradeAnswer {
        let script = proxy.script
        let offered = Self.offeredSubprotocols(request)
        let scripted = Self.scriptedRequest(request, subprotocols: offered)
        if let journal, let refusal = refusal(proxy.refusals.next(), scripted, journal: journal) { return .refuse(refusal) }
        guard let url = script.upstreamURL(path: request.uri.path, query: request.uri.query) else {
            return .refuse(RouteRefusal(status: .badRequest, body: RouteRefusal.errorBody("the upstream URL of this path cannot be made")))
        }
        var configuration = WebSocketConfiguration()
        configuration.tlsTrust = script.tlsTrust
        configuration.tlsIdentity = script.tlsIdentity
        configuration.maxMessageBytes = self.configuration.maxMessageBytes
        if let httpVersion = script.httpVersion { configuration.httpVersion = httpVersion }
        // A client that offers compression has the upstream offered it too (each leg agrees on
        // its own).
        if request.headers[values: .secWebSocketExtensions].contains(where: { $0.contains("permessage-deflate") }) {
            configuration.compression = PerMessageDeflate()
        }
        let upstreamRequest = WebSocketRequest(
            url: url, protocols: offered, additionalHeaders: ForwardedHeaders.forwarded(request.headers.map { ($0.name.rawName, $0.value) }))
        let (tracer, requestHeaders, upstreamConfiguration) = (activeTracer, request.headers, configuration)
        return .later { channel in
            let leg = ProxyUpstreamLeg(loop: channel.eventLoop)
            let attempt = UpstreamAttempt()
            let answer = channel.eventLoop.makePromise(of: UpgradeAnswer.self)
            let connecting = Task {
                let connection = journal?.newConnection() ?? 0
                let upstream: any WebSocketTransportConnection
                do {
                    upstream = try await WebSocketUpstream.connect(
                        request: upstreamRequest, configuration: upstreamConfiguration, on: channel.eventLoop, delegate: leg)
                } catch {
                    let refusal = Self.upstreamRefusal(error)
                    journal?.append(
                        .init(
                            connection: connection, path: scripted.path, direction: .out, kind: .refused, data: refusal.body,
                            code: Int(refusal.status.code), request: scripted, leg: .client,
                            action: "the upstream \(url.absoluteString) refused or could not be reached"))
                    self.metrics.refused(status: Int(refusal.status.code))
                    answer.succeed(.refuse(refusal))
                    return
                }
                // The client may have left while the upstream was asked: then the upstream goes too.
                guard attempt.opened(upstream) else {
                    upstream.abort()
                    answer.succeed(.refuse(RouteRefusal(status: .badGateway, body: RouteRefusal.errorBody("the client left"))))
                    return
                }
                var opened = scripted
                opened.subprotocol = upstream.negotiatedProtocol
                journal?.append(.init(connection: connection, path: scripted.path, direction: .in, kind: .open, request: opened, leg: .client))
                let headers: HTTPFields = opened.subprotocol.map { [.secWebSocketProtocol: $0] } ?? [:]
                let chosen = opened
                answer.succeed(
                    .accept(
                        headers,
                        WebSocketService { channel, deflate in
                            attempt.served()
                            let tap = proxy.tap?(chosen, chosen.subprotocol, upstream.negotiatedExtensions)
                            let service = ProxyWebSocketService(
                                upstream: upstream, leg: leg, proxy: proxy, journal: journal, tap: tap,
                                connection: connection, path: scripted.path, name: route, eventLoop: channel.eventLoop)
                            let trace = ConnectionTrace(requestHeaders, route: route, tracer: tracer)
                            try self.installEventLoopService(service, on: channel, deflate: deflate, trace: trace)
                        }
                    ))
            }
            // Held while the upstream is asked only: a finished task kept for the connection's
            // life would keep its memory too.
            attempt.asking(connecting)
            channel.closeFuture.whenComplete { _ in
                // Gone before it was served: its upstream goes too, made or still being made.
                attempt.clientLeft()
            }
            return answer.futureResult
        }
    }

    /// The client's answer when the upstream's handshake failed: the upstream's own refusal
    /// (its status, `Retry-After` and body), or 502 saying why it could not be reached.
    static func upstreamRefusal(_ error: any Error) -> RouteRefusal {
        guard let error = error as? WebSocketError else {
            return RouteRefusal(status: .badGateway, body: RouteRefusal.errorBody("the upstream could not be reached: \(error)"))
        }
        if error.code == .upgradeRejected, let status = error.status, (100..<600).contains(status) {
            var headers = ForwardedHeaders.relayed(error.headers.map { ($0.name, $0.value) })
            let body = error.body ?? ""
            if headers[.contentType] == nil { headers[.contentType] = JSONValue(body) == nil ? "text/plain; charset=utf-8" : "application/json" }
            return RouteRefusal(status: .init(code: status), headers: headers, body: body)
        }
        let why: String
        switch error.code {
        case .connectionFailed: why = "the upstream refused the connection or could not be reached"
        case .connectTimeout: why = "the upstream did not answer in time"
        case .tlsFailed: why = "the upstream's TLS handshake failed"
        default: why = "the upstream's handshake failed"
        }
        return RouteRefusal(status: .badGateway, body: RouteRefusal.errorBody("\(why): \(error.message)"))
    }
}

/// A proxied WebSocket's upstream connection until the client's connection is served by it: a
/// client that leaves before takes it with it.
private final class UpstreamAttempt: Sendable {
    private enum Phase {
        case connecting(Task<Void, Never>?)
        case open(any WebSocketTransportConnection)
        case served
        case clientLeft
    }

    private let phase = NIOLockedValueBox(Phase.connecting(nil))

    /// The task asking the upstream: cancelled if the client leaves meanwhile.
    func asking(_ task: Task<Void, Never>) {
        let cancel = phase.withLockedValue { phase -> Bool in
            switch phase {
            case .connecting:
                phase = .connecting(task)
                return false
            case .clientLeft:
                return true
            case .open, .served:
                return false
            }
        }
        if cancel { task.cancel() }
    }

    /// The upstream's connection is open; false when the client left meanwhile.
    func opened(_ upstream: any WebSocketTransportConnection) -> Bool {
        phase.withLockedValue { phase in
            guard case .connecting = phase else { return false }
            phase = .open(upstream)
            return true
        }
    }

    /// The client's connection is served: from now on its service ends the upstream's.
    func served() {
        phase.withLockedValue { $0 = .served }
    }

    /// The client's connection closed: an upstream not serving it yet is ended, or no longer
    /// asked.
    func clientLeft() {
        let (task, upstream) = phase.withLockedValue { phase -> (Task<Void, Never>?, (any WebSocketTransportConnection)?) in
            switch phase {
            case .connecting(let task):
                phase = .clientLeft
                return (task, nil)
            case .open(let upstream):
                phase = .clientLeft
                return (nil, upstream)
            case .served, .clientLeft:
                return (nil, nil)
            }
        }
        task?.cancel()
        upstream?.abort()
    }
}
