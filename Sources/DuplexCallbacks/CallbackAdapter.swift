public import Duplex

/// A ``Duplex/LiveConnection`` with closures instead of async/await: written once for both
/// clients. ``WebSocketCallbackAdapter`` and ``ServerSentEventCallbackAdapter`` are this type.
///
/// Handlers run on background tasks, in order per handler. Each `on…` call adds a handler; all
/// of them stop when the connection terminates. Sends (on a WebSocket) are made one after the
/// other in the order they were called, so their messages go out in that order.
public final class CallbackAdapter<Connection: LiveConnection>: LiveConnectionAdapter, Sendable {
    /// The connection underneath.
    public let connection: Connection
    private let sends: AsyncStream<@Sendable () async -> Void>.Continuation

    /// Wraps an existing connection. The initialisers from a URL or a request come from
    /// ``Duplex/LiveConnectionAdapter``.
    public init(connection: Connection) {
        self.connection = connection
        let (operations, sends) = AsyncStream<@Sendable () async -> Void>.makeStream()
        self.sends = sends
        // The one sender, so sends go out in call order. Ends when `sends` finishes: when the
        // adapter is released.
        Task {
            for await operation in operations { await operation() }
        }
    }

    deinit {
        sends.finish()
    }

    /// Calls `handler` for everything received from now on.
    public func onReceive(_ handler: @escaping @Sendable (Connection.Incoming) -> Void) {
        consume(connection.incoming, handler)
    }

    /// Calls `handler` with the current state, then every change.
    public func onStateChange(_ handler: @escaping @Sendable (Connection.State) -> Void) {
        consume(connection.stateEvents, handler)
    }

    /// Connects, then calls `completion`.
    public func connect(_ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        let connection = self.connection
        // A callback API's bridge: ends when connect() returns (its attempt's timeout bounds it).
        Task { completion(await Result(catching: { try await connection.connect() })) }
    }

    /// Disconnects (the connection can open again), then calls `completion`.
    public func disconnect(_ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        let connection = self.connection
        // Ends when the close handshake does (the close timeout bounds it).
        Task {
            await connection.disconnect()
            completion(.success(()))
        }
    }

    /// Terminates the connection: every handler stops.
    public func terminate() {
        let connection = self.connection
        // Ends at once: terminate() only waits for what is under way to stop.
        Task { await connection.terminate() }
    }

    /// Runs `operation` after every operation enqueued before it, then calls `completion`.
    func enqueue(_ operation: @escaping @Sendable () async throws -> Void, _ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        let result = sends.yield { completion(await Result(catching: operation)) }
        if case .terminated = result {
            completion(.failure(CancellationError()))
        }
    }

    func consume<Element: Sendable>(_ stream: AsyncStream<Element>, _ handler: @escaping @Sendable (Element) -> Void) {
        // Ends when the stream does: when the connection is terminated or released.
        Task {
            for await element in stream { handler(element) }
        }
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do {
            self = .success(try await body())
        } catch {
            self = .failure(error)
        }
    }
}
