import Duplex
import Foundation

let socket = WebSocket(url: URL(string: "ws://127.0.0.1:8080/echo")!)
let messages = socket.messages
try await socket.connect()
try await socket.send("hello")
for await message in messages { print(message.text ?? "") }
