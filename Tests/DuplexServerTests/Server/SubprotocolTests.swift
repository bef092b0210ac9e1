import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Testing

@Suite("subprotocol negotiation on /echo and /chat")
struct SubprotocolTests {
    static func negotiated(_ url: URL, offering protocols: [String]) async throws -> String? {
        let socket = WebSocket(request: WebSocketRequest(url: url, protocols: protocols))
        try await socket.connect()
        let chosen = socket.negotiatedProtocol
        await socket.terminate()
        return chosen
    }

    @Test("/echo selects the client's first offer by default, a configured preference otherwise, none when nothing matches")
    func echo() async throws {
        try await withTimeout(.seconds(20)) {
            try await withDuplexServer { server in
                let url = server.webSocketURL("/echo")
                let chosen1 = try await Self.negotiated(url, offering: ["b", "a"])
                #expect(chosen1 == "b")
                let chosen2 = try await Self.negotiated(url, offering: [])
                #expect(chosen2 == nil)
            }
            try await withDuplexServer(configuration: .init(echoSubprotocols: ["a", "c"])) { server in
                let url = server.webSocketURL("/echo")
                let chosen3 = try await Self.negotiated(url, offering: ["b", "c", "a"])
                #expect(chosen3 == "a", "the server's order wins")
                let chosen4 = try await Self.negotiated(url, offering: ["b"])
                #expect(chosen4 == nil)
            }
        }
    }

    @Test("/chat answers duplex.chat.v1 when offered, and serves a client that offers none")
    func chat() async throws {
        try await withTimeout(.seconds(20)) {
            try await withDuplexServer { server in
                let chosen5 = try await Self.negotiated(server.webSocketURL("/chat/p?name=a"), offering: ["x", ChatProtocol.subprotocol])
                #expect(chosen5 == "duplex.chat.v1")
                let chosen6 = try await Self.negotiated(server.webSocketURL("/chat/p?name=b"), offering: ["x"])
                #expect(chosen6 == nil)
                let chat = ChatClient(url: server.webSocketURL("/chat/p"), name: "c")
                let welcome = try await chat.join()
                #expect(welcome.members.contains("c"))
                await chat.leave()
            }
        }
    }
}
