import Foundation

/// How to reach PostgreSQL, and the timing of the PostgreSQL store.
public struct PostgresStoreConfiguration: Sendable, Hashable, CustomStringConvertible {
    /// The database server's host name or address.
    public var host: String
    /// Its port. Default 5432.
    public var port: Int
    /// The role to connect as.
    public var username: String
    /// The password, if the server asks for one.
    public var password: String?
    /// The database; by default the one named after the user.
    public var database: String?
    /// Whether the connection must use TLS (`?sslmode=require`). Default false: TLS is not
    /// attempted, as for a database on the same host or a private network.
    public var requireTLS: Bool
    /// How often a server renews its lease in the database. Default 1 s.
    public var heartbeatInterval: Duration
    /// How long a server's lease lasts: when a server stops renewing it (it was killed, or lost
    /// the database), its members are removed from their rooms after this, with `left` events,
    /// so that their names are free again. Default 10 s.
    public var lease: Duration
    /// How long a query may take before it counts as failed. Default 5 s.
    public var queryTimeout: Duration
    /// How many connections a server opens for queries, besides the one that listens. Default 8.
    public var maxConnections: Int
    /// How long a starting server tries to reach the database before it gives up. Default 30 s.
    public var startupTimeout: Duration

    /// A URL it cannot use.
    public struct URLError: Error, CustomStringConvertible, Equatable {
        /// What is wrong with it.
        public var description: String
    }

    public init(
        host: String,
        port: Int = 5432,
        username: String,
        password: String? = nil,
        database: String? = nil,
        requireTLS: Bool = false,
        heartbeatInterval: Duration = .seconds(1),
        lease: Duration = .seconds(10),
        queryTimeout: Duration = .seconds(5),
        maxConnections: Int = 8,
        startupTimeout: Duration = .seconds(30)
    ) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.requireTLS = requireTLS
        self.heartbeatInterval = heartbeatInterval
        self.lease = lease
        self.queryTimeout = queryTimeout
        self.maxConnections = max(maxConnections, 1)
        self.startupTimeout = startupTimeout
    }

    /// Reads `postgres://USER[:PASSWORD]@HOST[:PORT][/DATABASE][?sslmode=disable|require]`.
    public init(url text: String) throws {
        let quoted = String(text.prefix(200)).debugDescription
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased(),
            scheme == "postgres" || scheme == "postgresql"
        else {
            throw URLError(
                description: "the store must be memory or a postgres:// URL, as in postgres://duplex@127.0.0.1:5432/duplex (got \(quoted))")
        }
        guard let host = components.host, !host.isEmpty else {
            throw URLError(description: "the postgres URL names no host (got \(quoted))")
        }
        guard let user = components.user, !user.isEmpty else {
            throw URLError(description: "the postgres URL names no user, as in postgres://USER@HOST/DB (got \(quoted))")
        }
        let database = components.path.split(separator: "/").first.map(String.init)
        var requireTLS = false
        for item in components.queryItems ?? [] {
            switch (item.name, item.value) {
            case ("sslmode", "disable"?): requireTLS = false
            case ("sslmode", "require"?): requireTLS = true
            default:
                throw URLError(
                    description: "the postgres URL may only carry sslmode=disable or sslmode=require (got \(item.description.debugDescription))")
            }
        }
        self.init(
            host: host,
            port: components.port ?? 5432,
            username: user.removingPercentEncoding ?? user,
            password: components.password.map { $0.removingPercentEncoding ?? $0 },
            database: database?.removingPercentEncoding ?? database,
            requireTLS: requireTLS
        )
    }

    /// The URL without its password, for logs.
    public var redactedURL: String {
        "postgres://\(username)\(password == nil ? "" : ":***")@\(host.contains(":") ? "[\(host)]" : host):\(port)/\(database ?? "")"
    }

    /// The URL without its password (``redactedURL``): what logs and `ChatStoreConfiguration`'s
    /// description show.
    public var description: String { redactedURL }
}
