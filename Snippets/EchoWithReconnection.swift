import Duplex
import Foundation

let socket = WebSocket(
    url: URL(string: "ws://127.0.0.1:8080/echo")!,
    configuration: .init(
        ping: PingConfig(pingInterval: .seconds(15), maxPingFailures: 2),
        reconnection: .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30))
    )
)
let messages = socket.messages          // ask for streams before connecting: they start now
try await socket.connect()
try await socket.send("hello")
for await message in messages { print(message.text ?? "\(message.data.count) bytes") }
