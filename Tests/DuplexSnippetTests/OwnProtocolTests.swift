import Duplex
import DuplexTesting
import Foundation
import Synchronization
import Testing

struct Outgoing: Codable, Sendable { var type: String; var text: String }
struct Incoming: Codable, Sendable, Equatable { var type: String; var text: String? }

@Test func chatServiceAgainstMyBackend() async throws {
    let upgrades = Mutex(0)
    let backend = ScriptedRoute.webSocket("/chat/42/messages", subprotocols: ["chat.v1"]) { socket in
        try socket.send(json: Incoming(type: "welcome"))
        if socket.connection > 2 { socket.answerPings = false }  // the third connection's pings fail
    } onMessage: { message, socket in
        let frame = try message.decode(Outgoing.self)
        try socket.send(json: Incoming(type: "message", text: frame.text))
        if socket.messagesReceived == 2 { try socket.drop() }  // no close frame
    } accept: { _ in
        let attempt = upgrades.withLock { $0 += 1; return $0 }
        return attempt == 2 ? .refuse(status: 429, headers: ["Retry-After": "1"]) : .accept
    }

    try await withDuplexServer(routes: [backend]) { server in
        let socket = WebSocket(
            request: WebSocketRequest(url: server.webSocketURL("/chat/42/messages"), protocols: ["chat.v1"]),
            configuration: .init(
                ping: PingConfig(pingInterval: .seconds(1), maxPingFailures: 2),
                reconnection: .exponentialBackoff(baseDelay: .milliseconds(50), maxDelay: .seconds(5))
            )
        )
        let service = WebSocketCodableChannel<Outgoing, Incoming>(socket: socket)
        let states = socket.stateEvents
        var replies = service.receive().makeAsyncIterator()
        try await service.connect()
        #expect(try await replies.next() == Incoming(type: "welcome"))
        try await service.sendMessage(Outgoing(type: "say", text: "hi"))
        #expect(try await replies.next() == Incoming(type: "message", text: "hi"))
        try await service.sendMessage(Outgoing(type: "say", text: "again"))
        #expect(try await replies.next() == Incoming(type: "message", text: "again"))

        // Dropped: the socket reconnects through the 429, after its Retry-After.
        #expect(try await replies.next() == Incoming(type: "welcome"))
        // Then the backend withholds its pongs, and the socket notices.
        let lost = try await states.first(within: .seconds(10)) {
            if case .disconnected(.pingFailed) = $0 { true } else { false }
        }
        #expect(lost == .disconnected(.pingFailed(missedPings: 2)))
        await socket.terminate()

        let refused = try await server.journal.first(within: .seconds(5)) { $0.kind == .refused }
        #expect(refused.code == 429)
        let said = try server.journal.entries
            .filter { $0.direction == .in && $0.kind == .text }
            .map { try JSONDecoder().decode(Outgoing.self, from: Data(($0.data ?? "").utf8)).text }
        #expect(said == ["hi", "again"])
    }
}
