package import HTTPTypes
package import Hummingbird

/// Every route a server serves, in one table: each entry a method, a path pattern and the service
/// that answers it. It is the one place a path is matched to what serves it: WebSocket upgrades
/// and SSE streams (over HTTP/1.1 and HTTP/2) are matched here, on the connection's event loop,
/// and every other request through the Hummingbird router the table builds from the same
/// entries.
///
/// A server's table is made of route sets added in order (`DuplexServer.makeRouteTable()`):
/// the built-in routes, a replayed cassette's, a recording server's. An entry whose method and
/// pattern an earlier set already has is left out, so the earlier set wins.
package struct RouteTable: Sendable {
    /// Answers a plain request: a response, an SSE stream among them.
    package typealias Handler = @Sendable (Request, DuplexRequestContext) async throws -> Response
    /// Decides a WebSocket upgrade on the connection's event loop: the response headers to add
    /// (a subprotocol, say) and the service, or a refusal.
    package typealias Upgrade = @Sendable (Request, [String: String]) -> UpgradeAnswer
    /// Answers a stream request (its body read) on the connection's event loop: an SSE stream
    /// served there with no task (``EventStreamHandler``), or a plain answer.
    package typealias Stream = @Sendable (StreamRequest) -> StreamAnswer

    /// What a route does.
    package enum Service: Sendable {
        /// A WebSocket: `upgrade` decides an upgrade request; `plain` answers the same path
        /// asked without an upgrade (a 426, a validation error, or a stream of its own).
        case webSocket(upgrade: Upgrade, plain: Handler)
        /// An SSE stream.
        case stream(Stream)
        /// A request answered by a response.
        case http(Handler)
    }

    /// One entry.
    package struct Route: Sendable {
        package var method: HTTPRequest.Method
        package var pattern: RoutePattern
        package var service: Service
        /// Whether it is served while the server refuses requests (a chaos fault): the chaos
        /// routes are, so that a script can still reach them.
        package var servedWhileRefusing = false

        /// Whether this route and `other`, at the same method and pattern, answer the same
        /// requests: all do but a stream and a WebSocket.
        package func clashes(with other: Route) -> Bool {
            switch (service, other.service) {
            case (.stream, .webSocket), (.webSocket, .stream): false
            default: true
            }
        }

        /// The same route, served while the server refuses requests.
        package func servedWhileRefusing(_ served: Bool = true) -> Route {
            var route = self
            route.servedWhileRefusing = served
            return route
        }

        /// A plain route.
        package static func on(_ method: HTTPRequest.Method, _ path: String, _ handler: @escaping Handler) -> Route {
            Route(method: method, pattern: RoutePattern(path), service: .http(handler))
        }

        package static func get(_ path: String, _ handler: @escaping Handler) -> Route { .on(.get, path, handler) }
        package static func post(_ path: String, _ handler: @escaping Handler) -> Route { .on(.post, path, handler) }

        /// An SSE route: a request with `method` at `path` is answered by `stream`.
        package static func stream(_ path: String, method: HTTPRequest.Method = .get, _ stream: @escaping Stream) -> Route {
            Route(method: method, pattern: RoutePattern(path), service: .stream(stream))
        }

        /// A WebSocket route: an upgrade at `path` is decided by `upgrade`; a `GET` without one
        /// is answered by `plain`.
        package static func webSocket(_ path: String, upgrade: @escaping Upgrade, plain: @escaping Handler) -> Route {
            Route(method: .get, pattern: RoutePattern(path), service: .webSocket(upgrade: upgrade, plain: plain))
        }
    }

    package private(set) var routes: [Route]

    /// A table with only the host's own route: the answer to a request ``ConnectionGuard``
    /// refused behind others on a keep-alive connection (``Route/refused``), which every server
    /// needs, whatever else it serves (a recording server that forwards every other path).
    package init() { routes = [.refused] }

    /// Adds `routes` after those in the table, leaving out any whose method and pattern the
    /// table already has. A stream route and a WebSocket route may share a path: upgrades go to
    /// the WebSocket, and requests without one to the stream, instead of the WebSocket route's
    /// `plain` handler.
    package mutating func add(_ routes: [Route]) {
        for route in routes
        where !self.routes.contains(where: { $0.method == route.method && $0.pattern == route.pattern && $0.clashes(with: route) }) {
            self.routes.append(route)
        }
    }

    /// The service for a WebSocket upgrade (a `GET` with `Upgrade: websocket`, or HTTP/2's
    /// extended `CONNECT`): the most specific WebSocket route whose pattern matches the
    /// request's path decides; refused with 400 where none matches.
    package func webSocket(for request: Request) -> UpgradeAnswer {
        var best: (pattern: RoutePattern, upgrade: Upgrade, captures: [String: String])?
        for route in routes {
            guard case .webSocket(let upgrade, _) = route.service, let captures = route.pattern.match(request.uri.path) else { continue }
            if let current = best, !route.pattern.isMoreSpecific(than: current.pattern) { continue }
            best = (route.pattern, upgrade, captures)
        }
        guard let best else { return .refuse(.noRoute) }
        return best.upgrade(request, best.captures)
    }

    /// The stream route for a request head, and what its pattern captured: when the most
    /// specific route whose method and pattern match is a stream (at a WebSocket route's own
    /// pattern, the stream); nil otherwise.
    package func stream(for head: HTTPRequest) -> (Stream, [String: String])? {
        let path = (head.path ?? "/").prefix { $0 != "?" }
        var best: (route: Route, captures: [String: String])?
        for route in routes where route.method == head.method {
            guard let captures = route.pattern.match(path) else { continue }
            if let current = best {
                let moreSpecific = route.pattern.isMoreSpecific(than: current.route.pattern)
                let sameAndStream = route.pattern == current.route.pattern && { if case .stream = route.service { true } else { false } }()
                guard moreSpecific || sameAndStream else { continue }
            }
            best = (route, captures)
        }
        guard let best, case .stream(let stream) = best.route.service else { return nil }
        return (stream, best.captures)
    }

    /// Whether a request for `target` (a path, and maybe a query) is served while the server
    /// refuses requests (``Route/servedWhileRefusing``).
    package func servesWhileRefusing(_ target: String) -> Bool {
        let path = target.prefix { $0 != "?" }
        return routes.contains { $0.servedWhileRefusing && $0.pattern.match(path) != nil }
    }

    /// Hummingbird's router for every plain request: each route at its method and pattern, a
    /// WebSocket route's `plain` handler for its `GET`, behind `middleware`. Stream routes are
    /// not in it: their requests never reach it.
    package func router(middleware: some RouterMiddleware<DuplexRequestContext>) -> Router<DuplexRequestContext> {
        let router = Router(context: DuplexRequestContext.self)
        router.add(middleware: middleware)
        for route in routes {
            let handler: Handler
            switch route.service {
            case .http(let plain), .webSocket(_, let plain): handler = plain
            case .stream: continue
            }
            router.on(RouterPath(route.pattern.description), method: route.method) { request, context -> Response in
                try await handler(request, context)
            }
        }
        return router
    }
}
