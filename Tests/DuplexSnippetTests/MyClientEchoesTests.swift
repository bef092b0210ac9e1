import Duplex
import DuplexTesting
import Testing

@Test func myClientEchoes() async throws {
    try await withDuplexServer { server in
        let socket = WebSocket(url: server.webSocketURL("/echo"))  // ws://127.0.0.1:<port>/echo
        let messages = socket.messages
        try await socket.connect()
        try await socket.send("hello")
        #expect(try await messages.first(within: .seconds(5)).text == "hello")
        await socket.terminate()
    }
}
