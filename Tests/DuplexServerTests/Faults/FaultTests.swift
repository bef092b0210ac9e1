import DuplexSchema
import DuplexServer
import DuplexTesting
import Testing

@Suite("server faults: drop and close")
struct FaultTests {
    @Test("dropConnections closes TCP with no close frame, only in its scope")
    func drop() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/echo") { echo in
                    try await TestWebSocket.with(port: server.port, path: "/chat/kept?name=k") { chat in
                        _ = try await chat.receiveWelcome()
                        try await echo.sendText("warm")
                        _ = try await echo.receiveText()
                        #expect(server.server.dropConnections(.route("echo")) == 1)
                        // no close frame: the stream just ends
                        var frames: [TestWebSocket.Frame] = []
                        do {
                            while true { frames.append(try await echo.receiveFrame()) }
                        } catch is TestWebSocket.UnexpectedEnd {}
                        #expect(frames.allSatisfy { $0.opcode != 0x8 })
                        // the chat connection is untouched
                        try await chat.say("still here", id: "1")
                        #expect(try await chat.receiveAck(for: "1").ack.seq > 0)
                    }
                }
            }
        }
    }

    @Test("closeConnections sends the code and reason to WebSockets and ends SSE streams, per room")
    func close() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/chat/doomed?name=d") { doomed in
                    _ = try await doomed.receiveWelcome()
                    try await TestHTTPResponse.get(port: server.port, "/chat/doomed/events") { watcher in
                        try await watcher.readChunk()
                        #expect(server.server.closeConnections(.room("doomed"), code: WebSocketCloseCode(4000), reason: "chaos") == 2)
                        let close = try await doomed.receiveClose()
                        #expect(close.code == 4000 && close.reason == "chaos")
                        while try await watcher.readChunk() {}
                    }
                }
                #expect(server.server.closeConnections(.room("nobody"), code: .goingAway) == 0)
            }
        }
    }
}
