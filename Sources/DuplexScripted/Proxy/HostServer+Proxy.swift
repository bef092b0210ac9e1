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
        // The proxy passes messages on: a shallow buffer makes a client that does not read hold
        // the upstream back soon.
        configuration.streamBufferLimit = 256
        configuration.streamBufferBytes = 1024 * 1024
        // A client that offers compression has the upstream offered it too (each leg agrees on
        // its own).
        if request.headers[values: .secWebSocketExtensions].contains(where: { $0.contains("permessage-deflate") }) {
            configuration.compression = PerMessageDeflate()
        }
        let upstream = WebSocket(
            request: WebSocketRequest(
                url: url,
                protocols: offered,
                additionalHeaders: ForwardedHeaders.forwarded(request.headers.map { ($0.name.rawName, $0.value) })
            ),
            configuration: configuration
        )
        let events = upstream.events
        let (tracer, requestHeaders) = (activeTracer, request.headers)
        return .later { channel in
            // The client may leave while the upstream is asked: then the upstream goes too.
            let served = NIOLockedValueBox(false)
            channel.closeFuture.whenComplete { _ in
                if !served.withLockedValue({ $0 }) { Task { await upstream.terminate() } }
            }
            return channel.eventLoop.makeFutureWithTask { () -> UpgradeAnswer in
                let connection = journal?.newConnection() ?? 0
                do {
                    try await upstream.connect()
                } catch {
                    await upstream.terminate()
                    let refusal = Self.upstreamRefusal(error)
                    journal?.append(
                        .init(
                            connection: connection, path: scripted.path, direction: .out, kind: .refused, data: refusal.body,
                            code: Int(refusal.status.code), request: scripted, leg: .client,
                            action: "the upstream \(upstream.request.url.absoluteString) refused or could not be reached"))
                    self.metrics.refused(status: Int(refusal.status.code))
                    return .refuse(refusal)
                }
                var opened = scripted
                if case .connected(let subprotocol) = upstream.state { opened.subprotocol = subprotocol }
                journal?.append(.init(connection: connection, path: scripted.path, direction: .in, kind: .open, request: opened, leg: .client))
                let (chosen, extensions) = (opened, upstream.negotiatedExtensions)
                let headers: HTTPFields = opened.subprotocol.map { [.secWebSocketProtocol: $0] } ?? [:]
                return .accept(
                    headers,
                    WebSocketService { channel, deflate in
                        served.withLockedValue { $0 = true }
                        let tap = proxy.tap?(chosen, chosen.subprotocol, extensions)
                        let service = ProxyWebSocketService(
                            upstream: upstream, events: events, proxy: proxy, journal: journal, tap: tap,
                            connection: connection, path: scripted.path, name: route, eventLoop: channel.eventLoop)
                        let trace = ConnectionTrace(requestHeaders, route: route, tracer: tracer)
                        try self.installEventLoopService(service, on: channel, deflate: deflate, trace: trace)
                    }
                )
            }
        }
    }

    /// The client's answer when the upstream's handshake failed: the upstream's own refusal
    /// (its status, `Retry-After` and body), or 502 saying why it could not be reached.
    static func upstreamRefusal(_ error: any Error) -> RouteRefusal {
        guard let error = error as? WebSocketError else {
            return RouteRefusal(status: .badGateway, body: RouteRefusal.errorBody("the upstream could not be reached: \(error)"))
        }
        if error.code == .upgradeRejected, let status = error.status, (100..<600).contains(status) {
            var headers = HTTPFields()
            if let retryAfter = error.retryAfter { headers[.retryAfter] = String(Int(retryAfter.components.seconds)) }
            let body = error.body ?? ""
            headers[.contentType] = JSONValue(body) == nil ? "text/plain; charset=utf-8" : "application/json"
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
