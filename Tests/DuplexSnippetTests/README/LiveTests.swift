import Duplex
import DuplexTesting
import Foundation
import Testing

@Test func echoComesBackAfterADrop() async throws {
    try await withDuplexServer { server in
        let socket = WebSocket(
            url: server.webSocketURL("/echo"),
            configuration: .init(
                reconnection: .exponentialBackoff(baseDelay: .milliseconds(50), maxDelay: .seconds(1))
            )
        )
        let messages = socket.messages  // ask for streams before connecting
        let states = socket.stateEvents
        try await socket.connect()
        try await socket.send("hello")
        #expect(try await messages.first(within: .seconds(5)).text == "hello")

        // A fault: the server drops the connection with no close frame, as a dead network does.
        server.server.dropConnections(.route("echo"))
        _ = try await states.first(within: .seconds(5)) {
            if case .disconnected = $0 { true } else { false }
        }
        _ = try await states.first(within: .seconds(5)) {
            if case .connected = $0 { true } else { false }
        }
        try await socket.send("again")
        #expect(try await messages.first(within: .seconds(5)).text == "again")
        await socket.terminate()
    }
}

@Test func myProtocol() async throws {
    // Your backend's protocol: a welcome on connect, an ack for each message.
    let backend = ScriptedRoute.webSocket("/v1/feed") { socket in
        try socket.send(#"{"type":"welcome"}"#)
    } onMessage: { _, socket in
        try socket.send(#"{"type":"ack"}"#)
    }
    try await withDuplexServer(routes: [backend]) { server in
        let socket = WebSocket(url: server.webSocketURL("/v1/feed"))
        let messages = socket.messages
        try await socket.connect()
        #expect(try await messages.first(within: .seconds(5)).text == #"{"type":"welcome"}"#)
        try await socket.send(#"{"type":"subscribe","topic":"prices"}"#)
        #expect(try await messages.first(within: .seconds(5)).text == #"{"type":"ack"}"#)

        // The journal has every message each way: assert on what your client sent.
        let sent = try await server.journal.first(within: .seconds(5)) {
            $0.direction == .in && $0.kind == .text
        }
        #expect(sent.data == #"{"type":"subscribe","topic":"prices"}"#)
        await socket.terminate()
    }
}
