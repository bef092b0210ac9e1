import Duplex
import Foundation

struct ChatLine: Codable { var user: String; var text: String }

let socket = WebSocket(url: URL(string: "ws://127.0.0.1:8080/echo")!)
let messages = socket.messages          // ask for streams before connecting: they start now
try await socket.connect()
try await socket.send("hello")                               // text
try await socket.send(Data([1, 2, 3]))                       // binary
try await socket.sendJSON(ChatLine(user: "alice", text: "hi"))
try await socket.send(.string("also text"))                  // or .text(…), .data(…), .binary(…), .json(…)

for await message in messages {
    print(message.text ?? "\(message.data.count) bytes")
    if let line = try? message.decode(ChatLine.self) { print(line.user, line.text) }
}

await socket.disconnect(code: .normalClosure, reason: "done")   // streams stay open
try await socket.connect()                                      // connect works again
await socket.terminate()                                        // ends every stream, for good
