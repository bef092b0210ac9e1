import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Testing

@Suite("WS /chat/{room} over loopback")
struct ChatRouteTests {
    @Test("two members chat: both get every message with its seq, the sender gets an ack, presence is seen")
    func twoMembersChat() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/chat/lobby?name=alice") { alice in
                    let aliceWelcome = try await alice.receiveWelcome()
                    #expect(aliceWelcome.room == "lobby" && aliceWelcome.name == "alice" && aliceWelcome.latestSeq == 0)
                    guard case .joined(let aliceJoined) = try await alice.receiveChat() else { Issue.record("no joined"); return }
                    #expect(aliceJoined.seq == 1 && aliceJoined.name == "alice")

                    try await TestWebSocket.with(port: server.port, path: "/chat/lobby?name=bob%20b") { bob in
                        let bobWelcome = try await bob.receiveWelcome()
                        #expect(bobWelcome.members == ["alice", "bob b"])
                        #expect(bobWelcome.latestSeq == 1)
                        guard case .joined(let bobJoined) = try await alice.receiveChat() else { Issue.record("alice saw no join"); return }
                        #expect(bobJoined.name == "bob b" && bobJoined.seq == 2 && bobJoined.session == bobWelcome.session)

                        try await alice.say("hi bob", id: "a-1")
                        let (ack, before) = try await alice.receiveAck(for: "a-1")
                        #expect(ack.seq == 3 && !ack.duplicate)
                        #expect(before.compactMap(\.message).map(\.text) == ["hi bob"], "the sender gets its own message before the ack")
                        let (frame, _) = try await bob.receiveChat { $0.message != nil }
                        #expect(frame.message?.from == "alice" && frame.message?.seq == 3 && frame.message?.clientMessageID == "a-1")

                        try await bob.say("hello alice", id: "b-1")
                        let (aliceSees, _) = try await alice.receiveChat { $0.message != nil }
                        #expect(aliceSees.message?.text == "hello alice" && aliceSees.message?.seq == 4)
                        try await bob.sendClose()
                        _ = try await bob.receiveClose()
                    }
                    guard case .left(let left) = try await alice.receiveChat() else { Issue.record("alice saw no leave"); return }
                    #expect(left.name == "bob b" && left.seq == 5)
                }
            }
        }
    }

    @Test("since=SEQ resumes with exactly the events after SEQ, then live ones: no gap, no duplicate")
    func resumeWithSince() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/chat/resume?name=writer") { writer in
                    _ = try await writer.receiveWelcome()
                    var seqs: [Int] = []
                    for i in 1...6 {
                        try await writer.say("m\(i)", id: "w-\(i)")
                        seqs.append(try await writer.receiveAck(for: "w-\(i)").ack.seq)
                    }
                    let since = seqs[2]  // the reader saw up to the third message
                    try await TestWebSocket.with(port: server.port, path: "/chat/resume?name=reader&since=\(since)") { reader in
                        let welcome = try await reader.receiveWelcome()
                        #expect(welcome.latestSeq == seqs[5])
                        #expect(welcome.oldestSeq == 1)
                        var backlog: [ChatServerFrame] = []
                        for _ in (since + 1)...welcome.latestSeq { backlog.append(try await reader.receiveChat()) }
                        #expect(backlog.compactMap(\.message).map(\.text) == ["m4", "m5", "m6"])
                        #expect(backlog.compactMap(\.seq) == Array((since + 1)...welcome.latestSeq))
                        // then live: its own join, then a new message, with consecutive seqs
                        guard case .joined(let joined) = try await reader.receiveChat() else { Issue.record("no join"); return }
                        #expect(joined.seq == welcome.latestSeq + 1)
                        try await writer.say("live", id: "w-live")
                        let (live, skipped) = try await reader.receiveChat { $0.message != nil }
                        #expect(skipped.isEmpty)
                        #expect(live.message?.text == "live" && live.message?.seq == joined.seq + 1)
                    }
                }
            }
        }
    }

    @Test("history keeps the last N events; a since older than that gets what is kept, and welcome shows the gap")
    func historyLimit() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(historyLimit: 3)) { server in
                try await TestWebSocket.with(port: server.port, path: "/chat/small?name=w") { writer in
                    _ = try await writer.receiveWelcome()
                    for i in 1...5 {
                        try await writer.say("m\(i)", id: "\(i)")
                        _ = try await writer.receiveAck(for: "\(i)")
                    }
                    // events: 1 joined, 2...6 messages; kept: 4, 5, 6
                    try await TestWebSocket.with(port: server.port, path: "/chat/small?name=r&since=0") { reader in
                        let welcome = try await reader.receiveWelcome()
                        #expect(welcome.oldestSeq == 4 && welcome.latestSeq == 6)
                        var texts: [String] = []
                        for _ in 0..<3 { texts.append(try await reader.receiveChat().message?.text ?? "?") }
                        #expect(texts == ["m3", "m4", "m5"])
                    }
                }
            }
        }
    }

    @Test("a repeated clientMessageId gets the original ack and is not broadcast again")
    func duplicateSayIsIdempotent() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/chat/dedupe?name=alice") { alice in
                    _ = try await alice.receiveWelcome()
                    try await TestWebSocket.with(port: server.port, path: "/chat/dedupe?name=bob") { bob in
                        _ = try await bob.receiveWelcome()
                        try await alice.say("once", id: "same")
                        let first = try await alice.receiveAck(for: "same").ack
                        try await alice.say("once", id: "same")
                        let (second, between) = try await alice.receiveAck(for: "same")
                        #expect(second.seq == first.seq && second.duplicate)
                        #expect(between.isEmpty, "nothing is broadcast for the retry")
                        try await alice.say("next", id: "other")
                        // bob sees "once" exactly once, then "next"
                        var texts: [String] = []
                        while texts.last != "next" {
                            if let message = try await bob.receiveChat().message { texts.append(message.text) }
                        }
                        #expect(texts == ["once", "next"])
                    }
                }
            }
        }
    }

    @Test("bad frames get a specific error frame and the connection stays open")
    func badFramesGetErrors() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/chat/errors?name=eve") { socket in
                    _ = try await socket.receiveWelcome()
                    _ = try await socket.receiveChat()  // own join
                    let cases: [(send: String, code: ChatErrorCode)] = [
                        ("{not json", .badJSON),
                        ("[1,2,3]", .badJSON),
                        (#"{"type":"shout","v":1}"#, .unknownType),
                        (#"{"v":1}"#, .unknownType),
                        (#"{"type":"say","v":2,"clientMessageId":"x","text":"hi"}"#, .unsupportedVersion),
                        (#"{"type":"say","v":1,"text":"hi"}"#, .invalidFrame),
                        (#"{"type":"say","clientMessageId":"x","text":42}"#, .invalidFrame),
                        (#"{"type":"say","clientMessageId":"x","text":"   "}"#, .emptyText),
                        (#"{"type":"say","clientMessageId":"x","text":"\#(String(repeating: "a", count: 4097))"}"#, .textTooLong),
                        (#"{"type":"say","clientMessageId":"has space","text":"hi"}"#, .invalidMessageID),
                        (#"{"type":"say","clientMessageId":"","text":"hi"}"#, .invalidMessageID),
                    ]
                    for (send, code) in cases {
                        try await socket.sendText(send)
                        let error = try await socket.receiveError()
                        #expect(error.code == code, "\(send.prefix(60)) → \(error.reason)")
                        #expect(!error.reason.isEmpty)
                    }
                    try await socket.sendBinary([1, 2, 3])
                    #expect(try await socket.receiveError().code == .binaryNotSupported)
                    // still open and working; a missing v is read as version 1
                    try await socket.sendText(#"{"type":"say","clientMessageId":"ok","text":"still here"}"#)
                    #expect(try await socket.receiveAck(for: "ok").ack.seq == 2)
                }
            }
        }
    }

    @Test("a bad room, name or since gets 400 with a JSON error over plain HTTP, and error frame plus 1008 over WebSocket")
    func badJoinParameters() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let cases: [(path: String, code: ChatErrorCode)] = [
                    ("/chat/bad%20room?name=a", .invalidRoom),
                    ("/chat/\(String(repeating: "r", count: 65))?name=a", .invalidRoom),
                    ("/chat/lobby", .invalidName),
                    ("/chat/lobby?name=", .invalidName),
                    ("/chat/lobby?name=%20lead", .invalidName),
                    ("/chat/lobby?name=\(String(repeating: "n", count: 33))", .invalidName),
                    ("/chat/lobby?name=a%0Ab", .invalidName),
                    ("/chat/lobby?name=a&since=-1", .invalidSince),
                    ("/chat/lobby?name=a&since=abc", .invalidSince),
                ]
                for (path, code) in cases {
                    try await TestHTTPResponse.get(port: server.port, path) { response in
                        #expect(response.status == 400, "\(path)")
                        let body = try await response.readBody()
                        guard case .error(let error) = try ChatServerFrame.decode(Data(body.utf8)) else {
                            Issue.record("\(path): not an error body: \(body)")
                            return
                        }
                        #expect(error.code == code, "\(path)")
                    }
                    try await TestWebSocket.with(port: server.port, path: path) { socket in
                        let error = try await socket.receiveError()
                        let close = try await socket.receiveClose()
                        #expect(error.code == code, "\(path)")
                        #expect(close.code == 1008, "\(path)")
                    }
                }
            }
        }
    }

    @Test("past maxRooms with every room occupied, a new room is refused (503, room_limit and 1013); once one empties, it is evicted")
    func roomLimit() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(maxRooms: 1)) { server in
                try await TestWebSocket.with(port: server.port, path: "/chat/one?name=a") { socket in
                    _ = try await socket.receiveWelcome()
                    // A plain GET only validates: it creates no room (426: speak WebSocket).
                    try await TestHTTPResponse.get(port: server.port, "/chat/two?name=a") { response in
                        #expect(response.status == 426)
                    }
                    try await TestHTTPResponse.get(port: server.port, "/chat/two/events") { response in
                        #expect(response.status == 503)
                    }
                    try await TestWebSocket.with(port: server.port, path: "/chat/two?name=a") { refused in
                        let error = try await refused.receiveError()
                        let close = try await refused.receiveClose()
                        #expect(error.code == .roomLimit && close.code == 1013)
                    }
                    // The member leaves with the close handshake: once the server's close frame
                    // is here, "one" is empty.
                    try await socket.sendClose()
                    #expect(try await socket.receiveClose().code == 1000)
                }
                // "one" is empty: "two" evicts it.
                try await TestWebSocket.with(port: server.port, path: "/chat/two?name=a") { socket in
                    let welcome = try await socket.receiveWelcome()
                    #expect(welcome.room == "two")
                }
            }
        }
    }

    @Test("an impostor with the same name is refused, and cannot suppress the real member's message")
    func impostor() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/chat/id?name=alice") { alice in
                    let welcome = try await alice.receiveWelcome()
                    let token = try #require(welcome.resumeToken)
                    #expect(token.count >= 16)
                    // A second "alice" without the token: name_taken, 1008.
                    try await TestWebSocket.with(port: server.port, path: "/chat/id?name=alice") { impostor in
                        let error = try await impostor.receiveError()
                        let close = try await impostor.receiveClose()
                        #expect(error.code == .nameTaken && close.code == 1008)
                    }
                    // With a guessed token: the same.
                    try await TestWebSocket.with(port: server.port, path: "/chat/id?name=alice&token=AAAAAAAAAAAAAAAAAAAAAAAA") { impostor in
                        let error = try await impostor.receiveError()
                        #expect(error.code == .nameTaken)
                    }
                    // An impostor under another name sends alice's next message id first.
                    try await TestWebSocket.with(port: server.port, path: "/chat/id?name=mallory") { mallory in
                        _ = try await mallory.receiveWelcome()
                        try await mallory.say("fake", id: "abc-1")
                        let fake = try await mallory.receiveAck(for: "abc-1")
                        #expect(fake.ack.duplicate != true)
                        try await alice.say("the real one", id: "abc-1")
                        let (ack, before) = try await alice.receiveAck(for: "abc-1")
                        #expect(ack.duplicate != true, "alice's message is not taken for mallory's")
                        let delivered = before.contains { frame in
                            if case .message(let message) = frame { return message.from == "alice" && message.text == "the real one" }
                            return false
                        }
                        #expect(delivered, "alice's message was broadcast: \(before)")
                    }
                    // With her token, alice takes over her own name: the older connection gets 4001.
                    try await TestWebSocket.with(port: server.port, path: "/chat/id?name=alice&token=\(token)") { again in
                        let second = try await again.receiveWelcome()
                        #expect(second.resumeToken == token && second.members.filter { $0 == "alice" }.count == 1)
                        let close = try await alice.receiveClose()
                        #expect(close.code == 4001)
                    }
                }
            }
        }
    }

    @Test("a name of one letter and thousands of combining marks is refused by its bytes")
    func nameBytes() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let zalgo = "a" + String(repeating: "\u{301}", count: 1000)
                let encoded = zalgo.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                try await TestHTTPResponse.get(port: server.port, "/chat/z?name=\(encoded)") { response in
                    #expect(response.status == 400)
                    _ = try await response.readChunk()
                    #expect(response.bodyText.contains("128 bytes"), "\(response.bodyText)")
                }
            }
        }
    }
}
