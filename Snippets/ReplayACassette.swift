import Duplex
import DuplexSchema
import DuplexTesting
import Foundation

let cassette = try Cassette(jsonLines: String(contentsOfFile: "session.cassette", encoding: .utf8))
try await withReplayServer(cassette, matcher: .jsonIgnoring(["clientMessageId"])) { server in
    let socket = WebSocket(url: server.webSocketURL("/chat/lobby"))
    try await socket.connect()
    // drive the client: it meets the recorded server, and a message the recording
    // does not have fails the test with both sides
}
