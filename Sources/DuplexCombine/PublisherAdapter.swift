#if canImport(Combine)
public import Combine
#else
public import OpenCombine
#endif
public import Duplex

/// A ``Duplex/LiveConnection`` as Combine publishers (OpenCombine on Linux): written once for
/// both clients. ``WebSocketPublisherAdapter`` and ``ServerSentEventPublisherAdapter`` are this
/// type.
///
/// Each subscription gets its own stream from the connection. `connect()`, `send(_:)` and
/// `disconnect()` do their work when subscribed to, once per subscription.
public final class PublisherAdapter<Connection: LiveConnection>: LiveConnectionAdapter, Sendable {
    /// The connection underneath.
    public let connection: Connection

    /// Wraps an existing connection. The initialisers from a URL or a request come from
    /// ``Duplex/LiveConnectionAdapter``.
    public init(connection: Connection) {
        self.connection = connection
    }

    /// Everything received from subscription on.
    public var incoming: AnyPublisher<Connection.Incoming, Never> {
        let connection = self.connection
        return AsyncStreamPublisher { connection.incoming }.eraseToAnyPublisher()
    }

    /// The current state, then every change.
    public var stateEvents: AnyPublisher<Connection.State, Never> {
        let connection = self.connection
        return AsyncStreamPublisher { connection.stateEvents }.eraseToAnyPublisher()
    }

    /// Connects when subscribed to; emits once and finishes, or fails with the error.
    public func connect() -> AnyPublisher<Void, any Error> {
        let connection = self.connection
        return Self.operation { try await connection.connect() }
    }

    /// Disconnects when subscribed to (the connection can open again).
    public func disconnect() -> AnyPublisher<Void, any Error> {
        let connection = self.connection
        return Self.operation { await connection.disconnect() }
    }

    /// Terminates the connection: every publisher finishes.
    public func terminate() {
        let connection = self.connection
        // Ends at once: terminate() only waits for what is under way to stop.
        Task { await connection.terminate() }
    }

    /// A publisher that runs `body` when subscribed to, then emits once and finishes, or fails
    /// with its error.
    static func operation(_ body: @escaping @Sendable () async throws -> Void) -> AnyPublisher<Void, any Error> {
        AsyncStreamPublisher<Result<Void, OperationFailure>> {
            AsyncStream { continuation in
                // Ends when `body` does, or when the subscriber cancels (which cancels it).
                let task = Task {
                    do {
                        try await body()
                        continuation.yield(.success(()))
                    } catch {
                        continuation.yield(.failure(OperationFailure(error: error)))
                    }
                    continuation.finish()
                }
                continuation.onTermination = { _ in task.cancel() }
            }
        }
        .setFailureType(to: (any Error).self)
        .flatMap { result in result.publisher.mapError { $0.error } }
        .eraseToAnyPublisher()
    }
}

/// Carries an operation's error through a never-failing stream.
struct OperationFailure: Error {
    var error: any Error
}
