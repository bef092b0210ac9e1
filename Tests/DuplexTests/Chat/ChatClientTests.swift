@testable import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Testing

@Suite("ChatSession: resume, dedup, resend, members")
struct ChatSessionTests {
    let now = Date(timeIntervalSince1970: 1_795_339_800)

    func welcome(latest: Int, oldest: Int?, members: [String] = ["alice"], session: String = "s-alice") -> ChatServerFrame {
        .welcome(ChatWelcome(session: session, room: "lobby", name: "alice", members: members, latestSeq: latest, oldestSeq: oldest))
    }

    func message(_ seq: Int, from: String = "bob", id: String? = nil) -> ChatServerFrame {
        .message(ChatMessage(room: "lobby", seq: seq, clientMessageID: id ?? "b-\(seq)", from: from, text: "m\(seq)", sentAt: now))
    }

    @Test("the join URL carries name, then since= the last seq seen; + is escaped")
    func joinURL() {
        var session = ChatSession(name: "a+b c", idPrefix: "x")
        let url = URL(string: "ws://127.0.0.1:1/chat/lobby?name=old&since=9&keep=1")!
        #expect(session.joinURL(url).absoluteString == "ws://127.0.0.1:1/chat/lobby?keep=1&name=a%2Bb%20c")
        _ = session.received(welcome(latest: 0, oldest: nil), on: 1)
        _ = session.received(message(7), on: 1)
        #expect(session.joinURL(url).absoluteString == "ws://127.0.0.1:1/chat/lobby?keep=1&name=a%2Bb%20c&since=7")
    }

    @Test("a replayed seq is reported once; a gap the server no longer keeps is reported as missed")
    func dedupAndGap() {
        var session = ChatSession(name: "alice", idPrefix: "x")
        _ = session.received(welcome(latest: 0, oldest: nil), on: 1)
        #expect(
            session.received(message(1), on: 1).events == [
                .message(ChatMessage(room: "lobby", seq: 1, clientMessageID: "b-1", from: "bob", text: "m1", sentAt: now))
            ])
        #expect(session.received(message(1), on: 1).events.isEmpty)
        let reaction = session.received(welcome(latest: 20, oldest: 10), on: 2)
        #expect(reaction.events.first == .missed(2...9))
        #expect(session.received(message(10), on: 2).events.count == 1)
        #expect(session.lastSeq == 10)
    }

    @Test("unacknowledged messages are resent on each welcome, until acked; rejected ones are dropped")
    func resend() {
        var session = ChatSession(name: "alice", idPrefix: "x")
        _ = session.received(welcome(latest: 0, oldest: nil), on: 2)
        let first = session.say("one")
        let second = session.say("two")
        #expect(first.clientMessageID == "x-1" && second.clientMessageID == "x-2")
        #expect(
            session.received(.ack(ChatAck(clientMessageID: "x-1", seq: 1)), on: 2).events == [.delivered(ChatAck(clientMessageID: "x-1", seq: 1))])
        #expect(session.received(welcome(latest: 1, oldest: 1), on: 3).send == [second])
        _ = session.received(.error(ChatErrorFrame(code: .textTooLong, reason: "long", clientMessageID: "x-2")), on: 3)
        #expect(session.pending.isEmpty)
    }

    @Test("an error before the welcome is a refused join")
    func refused() {
        var session = ChatSession(name: "alice", idPrefix: "x")
        let refusal = ChatErrorFrame(code: .invalidName, reason: "bad")
        #expect(session.received(.error(refusal), on: 3).refused == refusal)
    }

    @Test("members follow live presence, skip replayed presence and the client's own join")
    func members() {
        var session = ChatSession(name: "alice", idPrefix: "x")
        _ = session.received(welcome(latest: 5, oldest: 1, members: ["alice", "bob"]), on: 3)
        _ = session.received(.joined(ChatPresence(room: "lobby", seq: 6, name: "alice", session: "s-alice", at: now)), on: 3)
        _ = session.received(.joined(ChatPresence(room: "lobby", seq: 7, name: "carol", session: "s-carol", at: now)), on: 3)
        #expect(session.members == ["alice", "bob", "carol"])
        _ = session.received(.left(ChatPresence(room: "lobby", seq: 8, name: "bob", session: "s-bob", at: now)), on: 3)
        #expect(session.members == ["alice", "carol"])
        // A resume replays 6...8 before the live events; the welcome's list already counts them.
        _ = session.received(welcome(latest: 8, oldest: 1, members: ["alice", "carol"]), on: 4)
        #expect(session.members == ["alice", "carol"])
    }

    @Test("a welcome that already lists a member whose joined comes after it (the PostgreSQL store) lists it once")
    func membersListedAheadOfTheirJoin() {
        var session = ChatSession(name: "alice", idPrefix: "x")
        _ = session.received(welcome(latest: 5, oldest: 1, members: ["alice", "dave"]), on: 1)
        _ = session.received(.joined(ChatPresence(room: "lobby", seq: 6, name: "dave", session: "s-dave", at: now)), on: 1)
        #expect(session.members == ["alice", "dave"])
    }
}

@Suite("ChatClient against the real server")
struct ChatClientTests {
    static let wait: Duration = .seconds(10)

    @Test("two clients talk; across server drops every message arrives exactly once, in order")
    func talkAcrossDrops() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                let url = server.webSocketURL("/chat/cli")
                let fast = WebSocketConfiguration(reconnection: .fixedDelay(.milliseconds(20)))
                let alice = ChatClient(url: url, name: "alice", configuration: fast)
                let bob = ChatClient(url: url, name: "bob", configuration: fast)
                let bobEvents = bob.events
                let aliceWelcome = try await alice.join()
                #expect(aliceWelcome.members == ["alice"])
                try await bob.join()
                #expect(bob.members == ["alice", "bob"])
                // The says do not wait for their acks, so the drops fall among them: the first
                // reaches both members; the later ones whoever is connected by then. A say that
                // went out on a dropped connection is resent on the next welcome.
                for i in 1...30 {
                    try await alice.say("line \(i)")
                    if i % 10 == 0 {
                        let dropped = server.server.dropConnections(.room("cli"))
                        if i == 10 { #expect(dropped == 2) }
                    }
                }
                #expect(await alice.waitForDelivery(timeout: Self.wait))
                var received: [String] = []
                var sawReconnect = false
                // A drop ends bob's connection after what the server had already sent on it, so
                // bob's disconnection can follow the last message: read until both are seen.
                for await event in bobEvents {
                    switch event {
                    case .message(let message) where message.from == "alice": received.append(message.text)
                    case .disconnected(_, let reconnecting): sawReconnect = sawReconnect || reconnecting
                    default: break
                    }
                    if received.count >= 30, sawReconnect { break }
                }
                #expect(received == (1...30).map { "line \($0)" })
                #expect(sawReconnect)
                await alice.leave()
                await bob.leave()
            }
        }
    }

    @Test("a refused join throws the server's reason and does not reconnect")
    func refusedJoin() async throws {
        try await withTimeout(.seconds(20)) {
            try await withDuplexServer { server in
                let chat = ChatClient(
                    url: server.webSocketURL("/chat/lobby"), name: " spaced ", configuration: .init(reconnection: .fixedDelay(.milliseconds(10))))
                let error = await #expect(throws: ChatProtocolError.self) { try await chat.join() }
                #expect(error?.code == .invalidName)
                _ = try await chat.socket.stateEvents.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
                #expect(chat.socket.queuedSendCount == 0)
                await #expect(throws: WebSocketError.self) { try await chat.say("hi") }
            }
        }
    }

    @Test("saying empty or oversized text throws before anything is sent")
    func badText() async throws {
        try await withTimeout(.seconds(20)) {
            try await withDuplexServer { server in
                let chat = ChatClient(url: server.webSocketURL("/chat/lobby"), name: "alice")
                try await chat.join()
                await #expect(throws: ChatProtocolError.self) { try await chat.say("   ") }
                await #expect(throws: ChatProtocolError.self) { try await chat.say(String(repeating: "x", count: 5000)) }
                #expect(chat.pendingCount == 0)
                await chat.leave()
            }
        }
    }
}

@Suite("WebSocket.ping")
struct WebSocketPingTests {
    @Test("ping returns a round-trip time from the real server; fails when not connected or blackholed")
    func ping() async throws {
        try await withTimeout(.seconds(20)) {
            try await withDuplexServer { server in
                let proxy = try await FaultProxy.start(upstreamPort: server.port)
                let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(proxy.port)/echo")!)
                await #expect(throws: WebSocketError.self) { _ = try await socket.ping() }
                try await socket.connect()
                let rtt = try await socket.ping()
                #expect(rtt > .zero && rtt < .seconds(5))
                proxy.add(.blackhole, direction: .both)
                let error = await #expect(throws: WebSocketError.self) { _ = try await socket.ping(timeout: .milliseconds(300)) }
                #expect(error?.code == .pingFailed)
                await socket.terminate()
                await proxy.stop()
            }
        }
    }
}
