import DuplexSchema
import DuplexWire
import NIOConcurrencyHelpers
import Testing

@testable import DuplexHost

/// The registry of live connections that faults and shutdowns reach, without a server.
@Suite("ConnectionRegistry")
struct ConnectionRegistryTests {
    /// Registers a connection that records the commands it is sent.
    static func register(_ registry: ConnectionRegistry, route: String, room: String? = nil) -> (UInt64, NIOLockedValueBox<[String]>) {
        let received = NIOLockedValueBox<[String]>([])
        let id = registry.register(ConnectionInfo(kind: .webSocket, route: route, room: room)) { command in
            received.withLockedValue { $0.append("\(command)") }
        }
        return (id, received)
    }

    @Test("a command reaches the connections a scope matches, by route or by room, and says how many")
    func scopes() {
        let registry = ConnectionRegistry(metrics: ServerMetrics())
        let (_, echo) = Self.register(registry, route: "echo")
        let (_, lobby) = Self.register(registry, route: "chat", room: "lobby")
        let (_, other) = Self.register(registry, route: "chat", room: "other")
        #expect(registry.send(.drop, matching: ConnectionScope.route("chat").matches) == 2)
        #expect(registry.send(.stall(.seconds(1)), matching: ConnectionScope.room("lobby").matches) == 1)
        #expect(registry.send(.drop, matching: ConnectionScope.route("nothing").matches) == 0)
        #expect(echo.withLockedValue { $0 }.isEmpty)
        #expect(lobby.withLockedValue { $0 }.count == 2)
        #expect(other.withLockedValue { $0 }.count == 1)
        #expect(registry.send(.drop, matching: ConnectionScope.all.matches) == 3)
    }

    @Test("a removed connection is reached no more, and a connection counts open in its route's metrics until removed")
    func removal() throws {
        let metrics = ServerMetrics()
        let registry = ConnectionRegistry(metrics: metrics)
        let (id, received) = Self.register(registry, route: "echo")
        #expect(registry.count == 1)
        registry.remove(id)
        registry.remove(id)
        #expect(registry.count == 0, "removing twice is harmless")
        #expect(registry.send(.drop, matching: { _ in true }) == 0)
        #expect(received.withLockedValue { $0 }.isEmpty)
    }

    @Test("shutdown tells every connection to close, and a connection registered after it is told at once")
    func shutdown() async throws {
        let registry = ConnectionRegistry(metrics: ServerMetrics())
        let (told, tell) = AsyncStream<Void>.makeStream()
        let id = registry.register(ConnectionInfo(kind: .webSocket, route: "echo")) { _ in tell.yield() }
        let waiting = Task { await registry.shutdown(code: .goingAway, reason: "bye", timeout: .seconds(30)) }
        // Once the first is told, the shutdown has begun.
        try await withDeadline(.seconds(10), orThrow: { CancellationError() }) {
            for await _ in told { break }
        }
        let (late, second) = Self.register(registry, route: "echo")
        #expect(second.withLockedValue { $0 }.count == 1, "told to close as it registers")
        registry.remove(id)
        registry.remove(late)
        try await withDeadline(.seconds(10), orThrow: { CancellationError() }) { await waiting.value }
        #expect(registry.count == 0)
        registry.reopen()
        let (_, third) = Self.register(registry, route: "echo")
        #expect(third.withLockedValue { $0 }.isEmpty, "after reopen, a new connection is served")
    }
}
