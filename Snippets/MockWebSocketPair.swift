import DuplexTesting

let (client, server) = MockWebSocket.pair()
let atServer = server.messages
try await client.send(.string("hello"))
let first = try await atServer.first(within: .seconds(5))   // "hello"
await client.disconnect(code: .normalClosure, reason: "done")
// server.state == .disconnected(.closed(code: .normalClosure, reason: "done"))
