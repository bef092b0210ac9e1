// Seed 000 (an async/await wrapper over URLSessionWebSocketTask), its examples with
// `import Duplex`. Edits: `let websocket: WebSocket ...` placeholders become parameters;
// `UIImage.pngData()` (UIKit) is a `Data` of PNG bytes; `websocket = nil` needs a
// `var websocket: WebSocket?`.
//
// One behaviour differs, by choice (Duplex.docc, "Coming from the seeds"): `connect()` after
// `disconnect()` connects again, as seed 004 documents, where seed 000 said it "will do nothing".
import Duplex
import DuplexTesting
import Foundation
import Testing

enum Seed000 {
    static func create(serverURL: URL) async throws -> WebSocket {
        let websocket = WebSocket(url: serverURL)

        try await websocket.connect()
        try await websocket.disconnect()
        return websocket
    }

    static func send(_ websocket: WebSocket) async throws {
        // Text message
        try await websocket.send("Hello World!")

        // Binary message
        let imageBytes: Data? = Data([0x89, 0x50, 0x4E, 0x47])
        if let imageBytes {
            try await websocket.send(imageBytes)
        }
    }

    static func reconnect(_ websocket: WebSocket) async throws -> Bool {
        try await websocket.disconnect()
        let reconnected = try await websocket.reconnect()
        return reconnected === websocket
    }

    static func reconnectWhenConnected(_ websocket: WebSocket) async throws -> Bool {
        try await websocket.connect()
        let reconnected = try await websocket.reconnect()   // websocket == reconnected
        return reconnected === websocket
    }

    static func idempotent(_ websocket: WebSocket) async throws {
        try await websocket.connect()
        try await websocket.disconnect()
        try await websocket.connect()       // This will not throw an error
    }

    static func disconnectTwice(_ websocket: WebSocket) async throws {
        try await websocket.disconnect()    // This will not throw an error

        try await websocket.connect()
        try await websocket.disconnect()
        try await websocket.disconnect()    // Nor will this
    }

    static func release(_ url: URL) -> AsyncStream<WebSocketEvent> {
        var websocket: WebSocket? = WebSocket(url: url)
        let events = websocket!.events
        websocket = nil                     // This will cancel outstanding tasks and continuations
        return events
    }
}

@Suite("Seed 000: the async/await wrapper's examples")
struct Seed000Tests {
    @Test("connect, send, reconnect (returns the same socket), idempotent disconnect, release")
    func examples() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                let websocket = try await Seed000.create(serverURL: server.webSocketURL("/echo"))
                #expect(websocket.state == .disconnected)
                let same = try await Seed000.reconnect(websocket)
                #expect(same)
                let messages = websocket.messages
                try await Seed000.send(websocket)
                let echoed = try await messages.first(within: .seconds(5))
                #expect(echoed.text == "Hello World!")
                let stillSame = try await Seed000.reconnectWhenConnected(websocket)
                #expect(stillSame)
                try await Seed000.idempotent(websocket)
                #expect(websocket.state == .connected, "connect after disconnect connects again (seed 004's choice)")
                try await Seed000.disconnectTwice(websocket)
                #expect(websocket.state == .disconnected(.manuallyDisconnected))
                // "Sending a message on a closed socket will result in an error."
                await #expect { try await websocket.send("closed") } throws: { ($0 as? WebSocketError)?.code == .notConnected }
                // Releasing the last reference terminates: every stream ends.
                let events = Seed000.release(server.webSocketURL("/echo"))
                for await _ in events {}
            }
        }
    }
}
