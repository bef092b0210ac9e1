import DuplexHost
import DuplexSchema
import Foundation
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

extension DuplexServer {
    /// Refuses scripted routes (``DuplexServerConfiguration/routes``) that clash with a built-in
    /// route (the same method, and a path the built-in pattern matches) or with each other, and
    /// those whose path or method no route can have. ``run()`` checks this before it listens;
    /// call it to check a configuration without starting a server.
    /// - Throws: ``DuplexServerError/invalidRoutes(_:)`` saying which route and why.
    public func validateRoutes() throws(DuplexServerError) {
        var builtIn = RouteTable()
        builtIn.add(builtInRoutes())
        builtIn.add(healthRoutes())
        builtIn.add(chaosRoutes)
        builtIn.add([.get("/_journal") { _, _ in Response(status: .ok) }])
        var seen: [(method: String, pattern: RoutePattern)] = []
        for (index, route) in configuration.routes.enumerated() {
            let place = "routes[\(index)] (\(route))"
            guard route.path.hasPrefix("/"), !route.path.contains("?"), !route.path.contains("#") else {
                throw .invalidRoutes("\(place): a path starts with / and has no query or fragment")
            }
            guard HTTPRequest.Method(route.method) != nil, !["HEAD", "CONNECT", "TRACE", "OPTIONS"].contains(route.method) else {
                throw .invalidRoutes("\(place): \(route.method.debugDescription) is not a method a route can serve")
            }
            let pattern = RoutePattern(route.path)
            let probe = route.path.replacingOccurrences(of: "/:", with: "/x").replacingOccurrences(of: "*", with: "x")
            for existing in builtIn.routes where existing.method.rawValue == route.method && existing.pattern.match(probe) != nil {
                throw .invalidRoutes("\(place) clashes with the built-in route \(existing.method.rawValue) \(existing.pattern): choose another path")
            }
            do {
                try route.sseScript?.validate()
                try route.proxyScript?.validate()
            } catch {
                throw .invalidRoutes("\(place): \(error)")
            }
            if seen.contains(where: { $0.method == route.method && $0.pattern == pattern }) {
                throw .invalidRoutes("\(place): another scripted route has the same method and path")
            }
            seen.append((route.method, pattern))
        }
    }
}
