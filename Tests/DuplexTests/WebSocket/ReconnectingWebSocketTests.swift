import Duplex
import DuplexCallbacks
import DuplexServer
import DuplexTesting
import Foundation
import Testing

@Suite("ReconnectingWebSocket and the callback adapter's ordering")
struct ReconnectingWebSocketTests {
    @Test("sends made before the first connection opens are queued and arrive once it does")
    func queuedUntilConnected() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                server.server.refuseConnections(for: .milliseconds(300))
                let url = server.webSocketURL("/echo")
                let ws = ReconnectingWebSocket(connect: { WebSocket(url: url) }, strategy: .fixedDelay(.milliseconds(50)))
                let messages = ws.messages
                let states = ws.stateEvents
                Task { await ws.start() }
                _ = try await states.first(within: .seconds(5)) { $0 == .connecting }
                for n in 0..<3 { try await ws.send(.string("queued \(n)")) }
                #expect(ws.state == .connecting, "still refused: these sends were queued")
                var echoed: [String] = []
                for await message in messages {
                    echoed.append(message.text ?? "")
                    if echoed.count == 3 { break }
                }
                #expect(echoed == ["queued 0", "queued 1", "queued 2"])
                await ws.terminate()
            }
        }
    }

    @Test("it gives up as the strategy says: connect() throws, the state says after how many attempts")
    func givesUp() async throws {
        let port = try await withDuplexServer { server in server.port }  // closed once this returns
        try await withTimeout(.seconds(20)) {
            let ws = ReconnectingWebSocket(
                connect: { WebSocket(url: URL(string: "ws://127.0.0.1:\(port)/echo")!) },
                strategy: .fixedDelay(.milliseconds(10), maxAttempts: 2)
            )
            await #expect(throws: WebSocketError.self) { try await ws.connect() }
            #expect(ws.state == .disconnected(.reconnectionGaveUp(attempts: 2)))
            await #expect(throws: WebSocketError.self) { try await ws.send(.string("nobody")) }
        }
    }

    @Test("the callback adapter sends in call order, even without waiting for each completion")
    func callbackOrder() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                let ws = WebSocketCallbackAdapter(url: server.webSocketURL("/echo").absoluteString)
                let messages = ws.socket.messages
                try await ws.socket.connect()
                for n in 0..<200 { ws.send(.string("\(n)")) { _ in } }
                var received: [Int] = []
                for await message in messages {
                    received.append(Int(message.text ?? "") ?? -1)
                    if received.count == 200 { break }
                }
                #expect(received == Array(0..<200))
                ws.terminate()
            }
        }
    }
}
