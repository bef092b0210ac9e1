import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import MetricsTestKit
import Testing

/// The client's metrics, through swift-metrics into a test backend given in the configuration,
/// as the real client talks to the real server.
@Suite("client metrics")
struct ClientMetricsTests {
    static let websocket = [("kind", "websocket")]
    static let sse = [("kind", "sse")]

    /// The next element of `stream` that `matches`; nil when the stream ends first.
    static func next<T: Sendable>(_ stream: AsyncStream<T>, where matches: (T) -> Bool) async -> T? {
        for await element in stream where matches(element) { return element }
        return nil
    }

    @Test(
        "a WebSocket counts its attempts, messages and bytes each way, ping round trips (its own and ping()'s), a lost connection and the reconnection"
    )
    func webSocket() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let metrics = TestMetrics()
                // Pings every 100 ms; a loaded machine may miss some, which must not end the connection.
                var configuration = WebSocketConfiguration(
                    ping: PingConfig(pingInterval: .milliseconds(100), maxPingFailures: 1_000),
                    reconnection: .fixedDelay(.milliseconds(20))
                )
                configuration.metrics = metrics
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: configuration)
                let messages = socket.messages
                let roundTrips = socket.pingRoundTrips
                let states = socket.stateEvents
                try await socket.connect()
                for text in ["a", "bb", "ccc"] { try await socket.send(.text(text)) }
                var echoed = 0
                for await _ in messages {
                    echoed += 1
                    if echoed == 3 { break }
                }
                _ = await Self.next(roundTrips) { _ in true }
                _ = try await socket.ping()
                #expect(try metrics.expectTimer("duplex_client_ping_round_trip_seconds", Self.websocket).values.count >= 2)
                #expect(try metrics.expectCounter("duplex_client_messages_total", Self.websocket + [("direction", "out")]).totalValue == 3)
                #expect(try metrics.expectCounter("duplex_client_message_bytes_total", Self.websocket + [("direction", "out")]).totalValue == 6)
                #expect(try metrics.expectCounter("duplex_client_messages_total", Self.websocket + [("direction", "in")]).totalValue == 3)
                #expect(try metrics.expectCounter("duplex_client_message_bytes_total", Self.websocket + [("direction", "in")]).totalValue == 6)
                #expect(try metrics.expectTimer("duplex_client_ping_round_trip_seconds", Self.websocket).values.count >= 1)
                #expect(try metrics.expectCounter("duplex_client_connection_attempts_total", Self.websocket).totalValue == 1)

                // Dropped by the server, with no close frame: counted as lost, then reconnected.
                #expect(server.server.dropConnections(.route("echo")) == 1)
                _ = await Self.next(states) { if case .disconnected = $0 { true } else { false } }
                _ = await Self.next(states) { $0 == .connected }
                #expect(metrics.counterTotal(label: "duplex_client_connections_lost_total") == 1)
                #expect(try metrics.expectCounter("duplex_client_reconnects_total", Self.websocket).totalValue == 1)
                #expect(try metrics.expectCounter("duplex_client_connection_attempts_total", Self.websocket).totalValue == 2)
                await socket.terminate()
            }
        }
    }

    @Test("a failed attempt is counted by its error's code")
    func failedAttempt() async throws {
        try await withTimeout {
            // A port nothing listens on: a server's, once it stopped.
            let port = try await withDuplexServer { $0.port }
            let metrics = TestMetrics()
            var configuration = WebSocketConfiguration()
            configuration.metrics = metrics
            let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(port)/echo")!, configuration: configuration)
            await #expect(throws: WebSocketError.self) { try await socket.connect() }
            #expect(
                try metrics.expectCounter("duplex_client_connection_failures_total", Self.websocket + [("cause", "connectionFailed")]).totalValue == 1
            )
            await socket.terminate()
        }
    }

    @Test("an SSE client counts events and their bytes, the stream the server ended, the reconnection and the server's retry: it applied")
    func serverSentEvents() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(sseRetryMilliseconds: 50)) { server in
                let metrics = TestMetrics()
                var configuration = SSEConfiguration()
                configuration.metrics = metrics
                let sse = ServerSentEventManager(
                    url: server.httpURL("/events?interval=20"),
                    retryPolicy: RetryPolicy(initialDelay: 0.02, maxDelay: 1, jitter: 0),
                    configuration: configuration
                )
                let events = sse.events
                let states = sse.stateEvents
                try await sse.connect()
                var bytes = 0
                var received = 0
                for await event in events {
                    bytes += event.data.utf8.count
                    received += 1
                    if received == 3 { break }
                }
                #expect(try metrics.expectCounter("duplex_client_messages_total", Self.sse + [("direction", "in")]).totalValue >= 3)
                #expect(try metrics.expectCounter("duplex_client_message_bytes_total", Self.sse + [("direction", "in")]).totalValue >= Int64(bytes))
                #expect(server.server.endEventStreams(.route("events")) == 1)
                _ = await Self.next(states) { if case .disconnected = $0 { true } else { false } }
                _ = await Self.next(states) { $0 == .connected }
                #expect(try metrics.expectCounter("duplex_client_connections_lost_total", Self.sse + [("cause", "streamEnded")]).totalValue == 1)
                #expect(try metrics.expectCounter("duplex_client_reconnects_total", Self.sse).totalValue == 1)
                #expect(try metrics.expectRecorder("duplex_client_sse_retry_seconds", Self.sse).values == [0.05])
                await sse.terminate()
            }
        }
    }
}
