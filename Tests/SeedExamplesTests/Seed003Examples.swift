// Seed 003 (plain URLSessionWebSocketTask, a controller that re-listens and reconnects, and
// Codable messages with a `type` discriminator). Its controller is application code on
// Foundation's task; what carries over is the message handling, here with Duplex's
// `WebSocketMessage`, which has the same `.data` and `.string` cases as Foundation's:
// the seed's switch, `@unknown default` included, compiles unchanged (Swift warns that the
// default is never run: Duplex's enum is not resilient). The reconnecting controller is what
// `WebSocketConfiguration.reconnection` (or `ReconnectingWebSocket`) does for you.
import Duplex
import DuplexTesting
import Foundation
import Testing

// Websocket Communication types
enum MessageType: String, Codable {
  case handshake, ale, aleResponse
}

struct SinData: Codable {
  let type: MessageType
}

struct Handshake: Codable {
  var type = MessageType.handshake
}

struct Ale: Codable {
  var type = MessageType.ale
  var id: String
}

struct AleResponse: Codable {
  var type = MessageType.aleResponse
}

enum Seed003 {
    static func handle(_ message: WebSocketMessage, _ handle: (Data) -> Void) {
      switch message { // message can be Data or String
        case .data(let data):
          handle(data)
        case .string(let str):
          guard let data = str.data(using: .utf8) else { return }
          handle(data)
        @unknown default:
          break
      }
    }
}

@Suite("Seed 003: the controller's message handling")
struct Seed003Tests {
    @Test("the discriminated Codable messages round-trip through /echo and the seed's switch")
    func messages() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                let id = UUID()
                let socket = WebSocket(
                    url: URL(string: "ws://127.0.0.1:\(server.port)/echo?id=\(id)")!,
                    configuration: .init(reconnection: .exponentialBackoff(baseDelay: .milliseconds(50), maxAttempts: 5))
                )
                let messages = socket.messages
                try await socket.connect()
                try await socket.send(.data(try JSONEncoder().encode(Ale(id: id.uuidString))))
                try await socket.sendJSON(Handshake())
                var types: [MessageType] = []
                for await message in messages {
                    Seed003.handle(message) { data in
                        if let sinData = try? JSONDecoder().decode(SinData.self, from: data) { types.append(sinData.type) }
                    }
                    if types.count == 2 { break }
                }
                #expect(types == [.ale, .handshake])
                await socket.terminate()
            }
        }
    }
}
