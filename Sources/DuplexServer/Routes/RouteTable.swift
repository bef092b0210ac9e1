import HTTPTypes
import Hummingbird

/// Every route a server serves, in one table: each entry a method, a path pattern and the service
/// that answers it. It is the one place a path is matched to what serves it: WebSocket upgrades
/// (over HTTP/1.1 and HTTP/2) are matched here, on the connection's event loop, and every other
/// request through the Hummingbird router the table builds from the same entries.
///
/// A server's table is made of route sets added in order (``DuplexServer/makeRouteTable()``):
/// the built-in routes, a replayed cassette's, a recording server's. An entry whose method and
/// pattern an earlier set already has is left out, so the earlier set wins.
struct RouteTable: Sendable {
    /// Answers a plain request: a response, an SSE stream among them.
    typealias Handler = @Sendable (Request, DuplexRequestContext) async throws -> Response
    /// Decides a WebSocket upgrade on the connection's event loop: the response headers to add
    /// (a subprotocol, say) and the service, or a refusal.
    typealias Upgrade = @Sendable (Request, [String: String]) -> UpgradeAnswer

    /// What a route does.
    enum Service: Sendable {
        /// A WebSocket: `upgrade` decides an upgrade request; `plain` answers the same path
        /// asked without an upgrade (a 426, a validation error, or a stream of its own).
        case webSocket(upgrade: Upgrade, plain: Handler)
        /// A request answered by a response.
        case http(Handler)
    }

    /// One entry.
    struct Route: Sendable {
        var method: HTTPRequest.Method
        var pattern: RoutePattern
        var service: Service
        /// Whether it is served while the server refuses requests (a chaos fault): the chaos
        /// routes are, so that a script can still reach them.
        var servedWhileRefusing = false

        /// The same route, served while the server refuses requests.
        func servedWhileRefusing(_ served: Bool = true) -> Route {
            var route = self
            route.servedWhileRefusing = served
            return route
        }

        /// A plain route.
        static func on(_ method: HTTPRequest.Method, _ path: String, _ handler: @escaping Handler) -> Route {
            Route(method: method, pattern: RoutePattern(path), service: .http(handler))
        }

        static func get(_ path: String, _ handler: @escaping Handler) -> Route { .on(.get, path, handler) }
        static func post(_ path: String, _ handler: @escaping Handler) -> Route { .on(.post, path, handler) }

        /// A WebSocket route: an upgrade at `path` is decided by `upgrade`; a `GET` without one
        /// is answered by `plain`.
        static func webSocket(_ path: String, upgrade: @escaping Upgrade, plain: @escaping Handler) -> Route {
            Route(method: .get, pattern: RoutePattern(path), service: .webSocket(upgrade: upgrade, plain: plain))
        }
    }

    private(set) var routes: [Route] = []

    /// Adds `routes` after those in the table, leaving out any whose method and pattern the
    /// table already has.
    mutating func add(_ routes: [Route]) {
        for route in routes where !self.routes.contains(where: { $0.method == route.method && $0.pattern == route.pattern }) {
            self.routes.append(route)
        }
    }

    /// The service for a WebSocket upgrade (a `GET` with `Upgrade: websocket`, or HTTP/2's
    /// extended `CONNECT`): the most specific WebSocket route whose pattern matches the
    /// request's path decides; refused with 400 where none matches.
    func webSocket(for request: Request) -> UpgradeAnswer {
        var best: (pattern: RoutePattern, upgrade: Upgrade, captures: [String: String])?
        for route in routes {
            guard case .webSocket(let upgrade, _) = route.service, let captures = route.pattern.match(request.uri.path) else { continue }
            if let current = best, !route.pattern.isMoreSpecific(than: current.pattern) { continue }
            best = (route.pattern, upgrade, captures)
        }
        guard let best else { return .refuse(.noRoute) }
        return best.upgrade(request, best.captures)
    }

    /// Whether a request for `target` (a path, and maybe a query) is served while the server
    /// refuses requests (``Route/servedWhileRefusing``).
    func servesWhileRefusing(_ target: String) -> Bool {
        let path = target.prefix { $0 != "?" }
        return routes.contains { $0.servedWhileRefusing && $0.pattern.match(path) != nil }
    }

    /// Hummingbird's router for every plain request: each route at its method and pattern, a
    /// WebSocket route's `plain` handler for its `GET`, behind `middleware`.
    func router(middleware: some RouterMiddleware<DuplexRequestContext>) -> Router<DuplexRequestContext> {
        let router = Router(context: DuplexRequestContext.self)
        router.add(middleware: middleware)
        for route in routes {
            let handler: Handler =
                switch route.service {
                case .http(let handler): handler
                case .webSocket(_, let plain): plain
                }
            router.on(RouterPath(route.pattern.description), method: route.method) { request, context -> Response in
                try await handler(request, context)
            }
        }
        return router
    }
}
