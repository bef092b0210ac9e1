import Duplex
import DuplexSchema
@testable import DuplexHost
@testable import DuplexServer
import DuplexTesting
import Foundation
import Testing

/// The SSE client over HTTP/2 against the in-process server: its default on `https://`, with
/// the streams of one origin sharing a connection.
@Suite("SSE over HTTP/2")
struct SSEHTTP2Tests {
    static func server() throws -> DuplexServerConfiguration {
        var configuration = DuplexServerConfiguration(port: 0, tickInterval: .milliseconds(20))
        configuration.tls = try .selfSigned()
        return configuration
    }

    static func client(_ configuration: DuplexServerConfiguration, _ version: HTTPVersionPreference = .automatic) -> SSEConfiguration {
        var client = SSEConfiguration(tlsTrust: .certificateAuthority(pem: configuration.tls!.certificateAuthorityPEM!))
        client.httpVersion = version
        return client
    }

    @Test("Ten streams to one origin share one HTTP/2 connection by default, and each gets its ticks in order")
    func tenStreamsOneConnection() async throws {
        try await withTimeout {
            let configuration = try Self.server()
            try await withDuplexServer(configuration: configuration) { server in
                let managers = (0..<10).map { _ in
                    ServerSentEventManager(url: server.httpURL("/events?interval=20"), configuration: Self.client(configuration))
                }
                let streams = managers.map(\.events)
                for manager in managers { try await manager.connect() }
                #expect(server.server.metrics.http2.healthJSON == #"{"connections":1,"streams":10,"webSockets":0}"#)
                for stream in streams {
                    let ids = await stream.prefix(3).compactMap { $0.id.flatMap(Int.init) }.reduce(into: []) { $0.append($1) }
                    #expect(ids.count == 3)
                    #expect(zip(ids, ids.dropFirst()).allSatisfy { $1 == $0 + 1 })
                }
                for manager in managers { await manager.disconnect() }
            }
        }
    }

    @Test("A stream reset by /_chaos/drop reconnects over HTTP/2 and resumes after the last id it read")
    func resumesAfterAReset() async throws {
        try await withTimeout {
            var configuration = try Self.server()
            configuration.chaos = true
            try await withDuplexServer(configuration: configuration) { server in
                let manager = ServerSentEventManager(
                    url: server.httpURL("/events?interval=20"),
                    retryPolicy: RetryPolicy(initialDelay: 0.01, maxDelay: 0.1, jitter: 0),
                    configuration: Self.client(configuration)
                )
                var events = manager.events.makeAsyncIterator()
                var states = manager.stateEvents.makeAsyncIterator()
                try await manager.connect()
                let before = try #require(await events.next()?.id.flatMap(Int.init))
                #expect(server.server.dropConnections(.route("events")) == 1)
                // The drop runs on the stream's event loop: events already on their way may come
                // first. Wait for the client to see it and reconnect (the enclosing limit bounds
                // the wait), then read on.
                var dropped = false
                while let state = await states.next() {
                    if case .disconnected = state { dropped = true }
                    if dropped, state == .connected { break }
                }
                #expect(dropped)
                var after: [Int] = []
                while after.count < 30, let event = await events.next() {
                    after.append(try #require(event.id.flatMap(Int.init)))
                }
                // Nothing lost or repeated across the reset: consecutive ids from the first one.
                #expect(after == Array((before + 1)...(before + 30)))
                #expect(server.server.metrics.http2.healthJSON.hasPrefix(#"{"connections":1,"streams":1"#))
                await manager.disconnect()
            }
        }
    }

    @Test("http1 keeps SSE on HTTP/1.1; http2 against a server without h2 fails, naming ALPN")
    func versions() async throws {
        try await withTimeout {
            let configuration = try Self.server()
            try await withDuplexServer(configuration: configuration) { server in
                let manager = ServerSentEventManager(url: server.httpURL("/events?interval=20"), configuration: Self.client(configuration, .http1))
                let stream = manager.events
                try await manager.connect()
                #expect(try await stream.first(within: .seconds(10)).event == "tick")
                #expect(server.server.metrics.http2.healthJSON == #"{"connections":0,"streams":0,"webSockets":0}"#)
                await manager.disconnect()
            }
            var withoutHTTP2 = try Self.server()
            withoutHTTP2.http2.enabled = false
            try await withDuplexServer(configuration: withoutHTTP2) { server in
                let manager = ServerSentEventManager(
                    url: server.httpURL("/events?interval=20"), retryPolicy: .disabled, configuration: Self.client(withoutHTTP2, .http2))
                let error = await #expect(throws: SSEError.self) { try await manager.connect() }
                #expect(error?.message.contains("did not negotiate HTTP/2") == true, "\(String(describing: error))")
            }
        }
    }
}
