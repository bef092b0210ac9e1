package import HTTPTypes
package import Hummingbird

/// Every route a server serves, in one table: each entry a method, a path pattern and the service
/// that answers it. It is the one place a path is matched to what serves it, by one matcher
/// (``RoutePattern``): WebSocket upgrades and SSE streams (over HTTP/1.1 and HTTP/2) are matched
/// here on the connection's event loop, and every other request is too, handed over by the
/// Hummingbird router the table builds (``router(middleware:)``), which matches nothing itself.
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
        /// What its connections are counted under in the server's metrics
        /// (``ConnectionInfo/route``), and the name a fault's `route=` scope takes: a WebSocket
        /// or stream route has one; a plain route, whose requests are no connections, has none.
        package var name: String?
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

        /// An SSE route named `name`: a request with `method` at `path` is answered by `stream`.
        package static func stream(_ path: String, name: String, method: HTTPRequest.Method = .get, _ stream: @escaping Stream) -> Route {
            Route(method: method, pattern: RoutePattern(path), service: .stream(stream), name: name)
        }

        /// A WebSocket route named `name`: an upgrade at `path` is decided by `upgrade`; a `GET`
        /// without one is answered by `plain`.
        package static func webSocket(_ path: String, name: String, upgrade: @escaping Upgrade, plain: @escaping Handler) -> Route {
            Route(method: .get, pattern: RoutePattern(path), service: .webSocket(upgrade: upgrade, plain: plain), name: name)
        }
    }

    package private(set) var routes: [Route]

    /// The names of its WebSocket and stream routes (``Route/name``), once each, in order: the
    /// routes the server's metrics count connections under, and a fault's `route=` can scope.
    package var connectionRouteNames: [String] {
        var names: [String] = []
        for route in routes {
            if let name = route.name, !names.contains(name) { names.append(name) }
        }
        return names
    }

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

    /// The plain route for a request (not a stream route: their requests never come here):
    /// the most specific whose method and pattern match `path`, with what its pattern captured.
    package func plain(_ method: HTTPRequest.Method, _ path: some StringProtocol) -> (route: Route, handler: Handler, captures: [String: String])? {
        var best: (route: Route, handler: Handler, captures: [String: String])?
        for route in routes where route.method == method {
            let handler: Handler
            switch route.service {
            case .http(let plain), .webSocket(_, let plain): handler = plain
            case .stream: continue
            }
            guard let captures = route.pattern.match(path) else { continue }
            if let current = best, !route.pattern.isMoreSpecific(than: current.route.pattern) { continue }
            best = (route, handler, captures)
        }
        return best
    }

    /// Hummingbird's router for every plain request, behind `middleware`. It matches nothing
    /// itself: every path at every method the table serves goes to one responder, and the
    /// table's own matcher (``plain(_:_:)``, as for upgrades and streams) picks the route. The
    /// route's pattern is the request's endpoint path (for a span's `http.route`), and its
    /// captures the context's parameters; a path no route matches is 404.
    package func router(middleware: some RouterMiddleware<DuplexRequestContext>) -> Router<DuplexRequestContext> {
        let router = Router(context: DuplexRequestContext.self)
        router.add(middleware: middleware)
        let table = self
        var methods: [HTTPRequest.Method] = []
        for route in routes where !methods.contains(route.method) {
            if case .stream = route.service { continue }
            methods.append(route.method)
        }
        for method in methods {
            for path in ["/", "/**"] {
                router.on(RouterPath(path), method: method) { request, context -> Response in
                    try await table.respond(to: request, context: context)
                }
            }
        }
        return router
    }

    /// Answers a plain request with the route ``plain(_:_:)`` picks.
    func respond(to request: Request, context: DuplexRequestContext) async throws -> Response {
        guard let found = plain(request.method, request.uri.path) else {
            // As Hummingbird names a request no route matches.
            context.coreContext.endpointPath.value = "NotFound"
            throw HTTPError(.notFound)
        }
        var context = context
        context.coreContext.endpointPath.value = found.route.pattern.description
        var parameters = Parameters()
        for (name, value) in found.captures.sorted(by: { $0.key < $1.key }) {
            parameters.append(key: Substring(name), value: Substring(value))
        }
        context.coreContext.parameters = parameters
        return try await found.handler(request, context)
    }
}
