import Duplex
import DuplexSchema
@testable import DuplexHost
@testable import DuplexServer
import DuplexTesting
import Foundation
import Testing

/// The WebSocket client over HTTP/2 (RFC 8441) against the in-process server: sockets to one
/// origin share a connection, and everything else is as over HTTP/1.1.
@Suite("WebSockets over HTTP/2")
struct WebSocketHTTP2Tests {
    static func server(_ change: (inout DuplexServerConfiguration) -> Void = { _ in }) throws -> DuplexServerConfiguration {
        var configuration = DuplexServerConfiguration(port: 0)
        configuration.tls = try .selfSigned()
        configuration.chaos = true
        change(&configuration)
        return configuration
    }

    static func client(_ configuration: DuplexServerConfiguration, _ version: HTTPVersionPreference) -> WebSocketConfiguration {
        var client = WebSocketConfiguration(tlsTrust: .certificateAuthority(pem: configuration.tls!.certificateAuthorityPEM!))
        client.httpVersion = version
        return client
    }

    /// `/health`'s `http2` object: the server's HTTP/2 connections, streams and WebSockets open.
    static func http2Health(_ server: RunningDuplexServer) -> String {
        server.server.metrics.http2.healthJSON
    }

    /// Waits until the server's HTTP/2 counts are `connections`, `streams` and `webSockets` (it
    /// counts a connection closed once its close has run on the event loop, a moment after the
    /// client's); the test's timeout bounds the wait.
    static func waitForCounts(_ server: RunningDuplexServer, connections: Int, streams: Int, webSockets: Int) async {
        let target = HTTP2Metrics.Counts(connections: connections, streams: streams, webSockets: webSockets)
        await server.server.metrics.http2.wait(until: target)
        #expect(server.server.metrics.http2.counts == target)
    }

    @Test("Three sockets to one origin share one HTTP/2 connection; each echoes, in order, and closes 1000")
    func shareOneConnection() async throws {
        try await withTimeout {
            let configuration = try Self.server()
            try await withDuplexServer(configuration: configuration) { server in
                let sockets = (0..<3).map { _ in WebSocket(url: server.webSocketURL("/echo"), configuration: Self.client(configuration, .http2)) }
                let streams = sockets.map(\.messages)
                for socket in sockets { try await socket.connect() }
                #expect(Self.http2Health(server) == #"{"connections":1,"streams":3,"webSockets":3}"#)
                for (n, socket) in sockets.enumerated() {
                    for m in 0..<5 { try await socket.send("socket \(n) message \(m)") }
                }
                for (n, stream) in streams.enumerated() {
                    let texts = await stream.prefix(5).reduce(into: []) { $0.append($1.text) }
                    #expect(texts == (0..<5).map { "socket \(n) message \($0)" })
                }
                for socket in sockets {
                    await socket.disconnect(code: .normalClosure, reason: "done")
                }
                // Each close handshake ran over its stream: the server read 1000 and answered it.
                let samples = server.server.metrics.samples()
                #expect(samples[#"duplex_close_codes_received_total{code="1000"}"#] == 3)
                #expect(samples[#"duplex_close_codes_sent_total{code="1000"}"#] == 3)
                // The last socket gone, the client closes the connection.
                await Self.waitForCounts(server, connections: 0, streams: 0, webSockets: 0)
            }
        }
    }

    @Test("Over HTTP/2: permessage-deflate, a 4 MiB message through the flow-control windows, and ping")
    func compressionLargeMessagesAndPing() async throws {
        try await withTimeout {
            let configuration = try Self.server()
            try await withDuplexServer(configuration: configuration) { server in
                var client = Self.client(configuration, .http2)
                client.compression = PerMessageDeflate(minimumBytes: 0)
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: client)
                let messages = socket.messages
                try await socket.connect()
                #expect(socket.negotiatedExtensions?.contains("permessage-deflate") == true)
                let large = (0..<(4 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) }
                try await socket.send(.binary(Data(large)))
                try await socket.send("after")
                var iterator = messages.makeAsyncIterator()
                #expect(await iterator.next()?.data == Data(large))
                #expect(await iterator.next()?.text == "after")
                let roundTrip = try await socket.ping(timeout: .seconds(10))
                #expect(roundTrip > .zero)
                #expect(Self.http2Health(server) == #"{"connections":1,"streams":1,"webSockets":1}"#)
                await socket.disconnect()
            }
        }
    }

    @Test("/_chaos/drop resets the socket's stream; it reconnects over HTTP/2 and sends what was queued meanwhile")
    func reconnectsAfterAReset() async throws {
        try await withTimeout {
            let configuration = try Self.server()
            try await withDuplexServer(configuration: configuration) { server in
                var client = Self.client(configuration, .http2)
                // A reconnection delay long enough that the send below waits in the queue.
                client.reconnection = .exponentialBackoff(baseDelay: .milliseconds(300), maxDelay: .milliseconds(300), maxAttempts: 20, jitter: 0)
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: client)
                let messages = socket.messages
                let states = socket.stateEvents
                try await socket.connect()
                try await socket.send("first")
                var iterator = messages.makeAsyncIterator()
                #expect(await iterator.next()?.text == "first")
                #expect(server.server.dropConnections(.route("echo")) == 1)
                var queued = -1
                for await state in states {
                    if case .disconnected = state, queued < 0 {
                        try await socket.send("while reconnecting")
                        queued = socket.queuedSendCount
                    }
                    if case .connected = state, queued >= 0 { break }
                }
                #expect(queued == 1, "the send waited in the queue")
                #expect(await iterator.next()?.text == "while reconnecting")
                #expect(Self.http2Health(server) == #"{"connections":1,"streams":1,"webSockets":1}"#)
                await socket.disconnect()
            }
        }
    }

    @Test("After GOAWAY a socket's stream runs on, and a new socket opens a new connection")
    func goAwayMovesNewSocketsToANewConnection() async throws {
        try await withTimeout {
            let configuration = try Self.server()
            try await withDuplexServer(configuration: configuration) { server in
                let old = WebSocket(url: server.webSocketURL("/echo"), configuration: Self.client(configuration, .http2))
                let oldMessages = old.messages
                try await old.connect()
                #expect(server.server.goAwayHTTP2Connections() == 1)
                // Once the old socket's echo comes back, GOAWAY (sent before it) has been read.
                try await old.send("on the old connection")
                var oldIterator = oldMessages.makeAsyncIterator()
                #expect(await oldIterator.next()?.text == "on the old connection")
                let new = WebSocket(url: server.webSocketURL("/echo"), configuration: Self.client(configuration, .http2))
                let newMessages = new.messages
                try await new.connect()
                #expect(Self.http2Health(server) == #"{"connections":2,"streams":2,"webSockets":2}"#)
                try await new.send("on the new connection")
                var newIterator = newMessages.makeAsyncIterator()
                #expect(await newIterator.next()?.text == "on the new connection")
                await old.disconnect()
                // The old connection's last stream ended: the server closes it.
                await Self.waitForCounts(server, connections: 1, streams: 1, webSockets: 1)
                await new.disconnect()
            }
        }
    }

    @Test("automatic: HTTP/2 where the server offers it, HTTP/1.1 where it does not; http2 fails there, naming ALPN")
    func automaticAndRequired() async throws {
        try await withTimeout {
            let withHTTP2 = try Self.server()
            try await withDuplexServer(configuration: withHTTP2) { server in
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: Self.client(withHTTP2, .automatic))
                try await socket.connect()
                #expect(Self.http2Health(server) == #"{"connections":1,"streams":1,"webSockets":1}"#)
                await socket.disconnect()
            }
            let withoutHTTP2 = try Self.server { $0.http2.enabled = false }
            try await withDuplexServer(configuration: withoutHTTP2) { server in
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: Self.client(withoutHTTP2, .automatic))
                let messages = socket.messages
                try await socket.connect()
                try await socket.send("over http/1.1")
                #expect(try await messages.first(within: .seconds(10)).text == "over http/1.1")
                #expect(Self.http2Health(server) == #"{"connections":0,"streams":0,"webSockets":0}"#)
                await socket.disconnect()
                let required = WebSocket(url: server.webSocketURL("/echo"), configuration: Self.client(withoutHTTP2, .http2))
                let error = await #expect(throws: WebSocketError.self) { try await required.connect() }
                #expect(error?.code == .handshakeFailed)
                #expect(error?.message.contains("did not negotiate HTTP/2") == true)
            }
        }
    }

    @Test("http2 needs wss://: a ws:// URL fails with handshakeFailed before connecting")
    func http2NeedsTLS() async throws {
        try await withTimeout {
            var client = WebSocketConfiguration()
            client.httpVersion = .http2
            let socket = WebSocket(url: URL(string: "ws://127.0.0.1:1/echo")!, configuration: client)
            let error = await #expect(throws: WebSocketError.self) { try await socket.connect() }
            #expect(error?.code == .handshakeFailed)
            #expect(error?.message.contains("wss://") == true)
        }
    }

    @Test("A refused CONNECT is upgradeRejected with its status, as a refused upgrade is")
    func refusedConnect() async throws {
        try await withTimeout {
            let configuration = try Self.server()
            try await withDuplexServer(configuration: configuration) { server in
                let socket = WebSocket(url: server.webSocketURL("/nowhere"), configuration: Self.client(configuration, .http2))
                let error = await #expect(throws: WebSocketError.self) { try await socket.connect() }
                #expect(error?.code == .upgradeRejected)
                #expect(error?.status == 400)
                // The refused stream gave its lease back: the connection is closed.
                await Self.waitForCounts(server, connections: 0, streams: 0, webSockets: 0)
            }
        }
    }
}
