@testable import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import TestSupport
import Testing

/// Resume across a server that lost its history (issue 10): seqs count within an epoch.
@Suite("epochs: resume across lost history")
struct EpochTests {
    static let fast = WebSocketConfiguration(
        ping: PingConfig(pingInterval: .milliseconds(500), maxPingFailures: 2),
        reconnection: .fixedDelay(.milliseconds(50)),
        connectTimeout: .seconds(10)
    )

    /// `fast` without its short pings: for tests that count the server's connections, where a
    /// pong late on a loaded machine would reconnect a member at the wrong moment.
    static let calm: WebSocketConfiguration = {
        var configuration = fast
        configuration.ping = PingConfig(pingInterval: .seconds(30), maxPingFailures: 2)
        return configuration
    }()

    @Test("ChatSession: a welcome in another epoch resets the position, reports the reset once, and resends")
    func sessionReset() {
        var session = ChatSession(name: "alice", idPrefix: "x")
        let at = Date(timeIntervalSince1970: 1_795_339_800)
        _ = session.received(
            .welcome(ChatWelcome(session: "s1", room: "r", name: "alice", members: ["alice"], latestSeq: 0, oldestSeq: nil, epoch: "A")), on: 1)
        _ = session.received(.message(ChatMessage(room: "r", seq: 14, clientMessageID: "b-1", from: "bob", text: "old", sentAt: at)), on: 1)
        let pending = session.say("unacked")
        let url = URL(string: "ws://127.0.0.1:1/chat/r")!
        #expect(session.joinURL(url).absoluteString.contains("since=14&epoch=A"))
        let reaction = session.received(
            .welcome(
                ChatWelcome(session: "s2", room: "r", name: "alice", members: ["alice"], latestSeq: 2, oldestSeq: 1, epoch: "B", recovered: false)),
            on: 2
        )
        #expect(reaction.events.first == .historyReset(previousEpoch: "A", missedAfter: at))
        #expect(!reaction.events.contains { if case .missed = $0 { true } else { false } })
        #expect(reaction.send == [pending], "what was not acknowledged is resent")
        #expect(session.lastSeq == 0, "the new epoch from its start")
        // Seq 1 of the new epoch (replayed) is new, although 1 < 14; and so is seq 3.
        let first = session.received(
            .message(ChatMessage(room: "r", seq: 1, clientMessageID: "c-1", from: "carol", text: "first", sentAt: at)), on: 2)
        #expect(first.events.count == 1)
        let next = session.received(.message(ChatMessage(room: "r", seq: 3, clientMessageID: "b-2", from: "bob", text: "new", sentAt: at)), on: 2)
        #expect(next.events.count == 1)
        #expect(session.joinURL(url).absoluteString.contains("since=3&epoch=B"))
        // A message the old server broadcast but never acked, resent by its sender to the new
        // one: broadcast again in the new epoch, reported once.
        let resent = session.received(.message(ChatMessage(room: "r", seq: 4, clientMessageID: "b-1", from: "bob", text: "old", sentAt: at)), on: 2)
        #expect(resent.events.isEmpty, "already reported in the old epoch")
        // A late frame from the old server's connection (1) is stale: ignored, position kept.
        let stale = session.received(
            .message(ChatMessage(room: "r", seq: 9000, clientMessageID: "b-9", from: "bob", text: "stale", sentAt: at)), on: 1)
        #expect(stale.events.isEmpty && session.lastSeq == 4)
        let staleAck = session.received(.ack(ChatAck(clientMessageID: pending.clientMessageID, seq: 15)), on: 1)
        #expect(staleAck.events.isEmpty && session.pending == [pending], "an ack from the server that lost its history does not count")
        // The same epoch again: an ordinary resume, no reset.
        let again = session.received(
            .welcome(
                ChatWelcome(session: "s3", room: "r", name: "alice", members: ["alice"], latestSeq: 3, oldestSeq: 1, epoch: "B", recovered: true)),
            on: 3)
        #expect(!again.events.contains { if case .historyReset = $0 { true } else { false } })
    }

    @Test("the server: since with the room's epoch replays exactly; with another, recovered is false and the epoch is replayed from its start")
    func serverEpochs() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                let url = server.webSocketURL("/chat/ep")
                let alice = ChatClient(url: url, name: "alice", configuration: Self.fast)
                let first = try await alice.join()
                let epoch = try #require(first.epoch)
                _ = try await alice.say("one")
                #expect(await alice.waitForDelivery(timeout: .seconds(10)))
                // The raw protocol: since=0 in the room's epoch replays from seq 1.
                let same = try await Self.welcome(server, "/chat/ep?name=w1&since=0&epoch=\(epoch)")
                #expect(same.recovered == true && same.epoch == epoch)
                let other = try await Self.welcome(server, "/chat/ep?name=w2&since=0&epoch=someOtherEpoch")
                #expect(other.recovered == false && other.epoch == epoch)
                let legacy = try await Self.welcome(server, "/chat/ep?name=w3&since=0")
                #expect(legacy.recovered == true, "since without epoch keeps its old meaning")
                await alice.leave()
            }
        }
    }

    static func welcome(_ server: RunningDuplexServer, _ path: String) async throws -> ChatWelcome {
        let socket = WebSocket(url: server.webSocketURL(path))
        let messages = socket.messages
        try await socket.connect()
        defer { Task { await socket.terminate() } }
        let first = try await messages.first(within: .seconds(10))
        guard case .string(let text) = first, case .welcome(let welcome) = try ChatServerFrame.decode(Data(text.utf8)) else {
            throw StreamEndedError()
        }
        return welcome
    }

    @Test("an amnesiac restart in process: both members report the reset once, and every message said afterwards arrives exactly once")
    func amnesiacRestart() async throws {
        try await withTimeout(.seconds(60)) {
            try await withDuplexServer { server in
                try await Self.chatAcrossLostHistory(url: server.webSocketURL("/chat/amnesia")) {
                    server.server.restart(downFor: .milliseconds(200), amnesia: true)
                }
            }
        }
    }

    /// Two members talk, `loseHistory` runs, then both must see one reset and every message said
    /// after their reconnection exactly once.
    static func chatAcrossLostHistory(url: URL, _ loseHistory: () async throws -> Void) async throws {
        let alice = ChatClient(url: url, name: "alice", configuration: fast)
        let bob = ChatClient(url: url, name: "bob", configuration: fast)
        let aliceEvents = alice.events
        let bobEvents = bob.events
        let aliceRejoins = alice.events
        let bobRejoins = bob.events
        _ = try await alice.join()
        _ = try await bob.join()
        for i in 1...5 { _ = try await alice.say("before \(i)") }
        #expect(await alice.waitForDelivery(timeout: .seconds(10)))
        try await loseHistory()
        // Each side: wait for its reset, then for the other's messages said after it.
        async let aliceSaw = Self.collect(aliceEvents, from: "bob", count: 10)
        async let bobSaw = Self.collect(bobEvents, from: "alice", count: 10)
        try await Self.waitForReset(aliceRejoins)
        try await Self.waitForReset(bobRejoins)
        for i in 1...10 {
            _ = try await alice.say("after \(i)")
            _ = try await bob.say("after \(i)")
        }
        let (a, b) = try await (aliceSaw, bobSaw)
        #expect(a.resets == 1 && b.resets == 1, "the reset is announced once: \(a.resets), \(b.resets)")
        #expect(a.texts.filter { $0.hasPrefix("after") } == (1...10).map { "after \($0)" }, "\(a.texts)")
        #expect(b.texts.filter { $0.hasPrefix("after") } == (1...10).map { "after \($0)" }, "\(b.texts)")
        await alice.leave()
        await bob.leave()
    }

    /// Waits until the client behind `events` has rejoined in a new epoch: a reset, then its welcome.
    static func waitForReset(_ events: AsyncStream<ChatEvent>) async throws {
        try await withTimeout(.seconds(30)) {
            var reset = false
            for await event in events {
                if case .historyReset = event { reset = true }
                if reset, case .welcome = event { return }
            }
            throw StreamEndedError()
        }
    }

    struct Seen: Sendable {
        var resets = 0
        var texts: [String] = []
    }

    /// Reads `events` until `count` messages from `sender` said after a reset have arrived.
    static func collect(_ events: AsyncStream<ChatEvent>, from sender: String, count: Int) async throws -> Seen {
        try await withTimeout(.seconds(40)) {
            var seen = Seen()
            for await event in events {
                switch event {
                case .historyReset: seen.resets += 1
                case .message(let message) where message.from == sender:
                    seen.texts.append(message.text)
                    if seen.texts.filter({ $0.hasPrefix("after") }).count == count { return seen }
                default: break
                }
            }
            return seen
        }
    }
}

/// The same across a real `duplex-server` process, stopped with SIGTERM or SIGKILL and started
/// again on the same port with nothing in memory.
@Suite("epochs: a real server process restarted")
struct ProcessRestartTests {
    /// The running server process; replaced on restart.
    final class ServerBox: Sendable {
        let process = NIOLockedValueBox<CLIProcess?>(nil)
        deinit { process.withLockedValue { $0 }?.signal(SIGKILL) }
    }

    /// Stops `server` with `signal` and starts a new process on the same port.
    static func restart(_ box: ServerBox, port: Int, signal: Int32) async throws {
        let old = try #require(box.process.withLockedValue { $0 })
        old.signal(signal)
        let exit = try await old.waitForExit()
        #expect(signal == SIGKILL || exit.status == 0, "\(exit)")
        let (new, newPort) = try await CLIProcess.server(["--port", String(port)])
        #expect(newPort == port)
        box.process.withLockedValue { $0 = new }
    }

    @Test(
        "ChatClient across SIGTERM and SIGKILL of the server process: one reset each, every later message exactly once",
        arguments: [SIGTERM, SIGKILL])
    func chatClients(signal: Int32) async throws {
        try await withTimeout(.seconds(90)) {
            let box = ServerBox()
            let (server, port) = try await CLIProcess.server()
            box.process.withLockedValue { $0 = server }
            let url = URL(string: "ws://127.0.0.1:\(port)/chat/restart")!
            try await EpochTests.chatAcrossLostHistory(url: url) {
                try await Self.restart(box, port: port, signal: signal)
            }
            box.process.withLockedValue { $0 }?.signal(SIGTERM)
        }
    }

    @Test("duplex chat in two processes across a server restart: both announce the reset, and go on talking")
    func chatCLI() async throws {
        try await withTimeout(.seconds(90)) {
            let box = ServerBox()
            let (server, port) = try await CLIProcess.server()
            box.process.withLockedValue { $0 = server }
            let url = "ws://127.0.0.1:\(port)/chat/lobby"
            let alice = try CLIProcess("duplex", ["chat", url, "--name", "alice"])
            try await alice.waitForStdout("* joined #lobby as alice")
            let bob = try CLIProcess("duplex", ["chat", url, "--name", "bob"])
            try await bob.waitForStdout("* joined #lobby as bob")
            alice.send("before")
            try await bob.waitForStdout("alice: before")
            try await Self.restart(box, port: port, signal: SIGTERM)
            try await alice.waitForStderr("! the server lost its history; messages after ")
            try await bob.waitForStderr("! the server lost its history; messages after ")
            try await alice.waitForStdout("* reconnected to #lobby")
            try await bob.waitForStdout("* reconnected to #lobby")
            alice.send("after the restart")
            try await bob.waitForStdout("alice: after the restart")
            bob.send("heard you")
            let seen = try await alice.waitForStdout("bob: heard you")
            #expect(seen.stdout.components(separatedBy: "bob: heard you").count == 2, "once")
            #expect(alice.output.stderr.components(separatedBy: "lost its history").count == 2, "the reset is announced once")
            alice.closeInput()
            bob.closeInput()
            #expect(try await alice.waitForExit().status == 0)
            #expect(try await bob.waitForExit().status == 0)
            box.process.withLockedValue { $0 }?.signal(SIGTERM)
        }
    }

    @Test("the room SSE stream across a real restart: ids carry the epoch, a foreign Last-Event-ID gets a reset event, then the live stream")
    func roomStream() async throws {
        try await withTimeout(.seconds(90)) {
            let box = ServerBox()
            let (server, port) = try await CLIProcess.server()
            box.process.withLockedValue { $0 = server }
            let sse = ServerSentEventManager(
                url: URL(string: "http://127.0.0.1:\(port)/chat/watched/events")!,
                retryPolicy: RetryPolicy(initialDelay: 0.05, maxDelay: 0.2, jitter: 0, minimumDelay: 0.05),
                configuration: .init(connectTimeout: .seconds(10))
            )
            let events = sse.events
            try await sse.connect()
            let member = ChatClient(url: URL(string: "ws://127.0.0.1:\(port)/chat/watched")!, name: "m", configuration: EpochTests.fast)
            _ = try await member.join()
            _ = try await member.say("old")
            var before: [ServerSentEvent] = []
            for await event in events {
                before.append(event)
                if event.event == "message" { break }
            }
            let oldEpoch = try #require(before.last?.id?.split(separator: ":").first.map(String.init))
            // Acknowledged before the kill: an unacknowledged "old" would rightly be said again
            // in the new epoch (nothing is lost), which is not what this test looks at.
            #expect(await member.waitForDelivery(timeout: .seconds(10)))
            try await Self.restart(box, port: port, signal: SIGKILL)
            // The member rejoins the new process; then it says something new.
            var after: [ServerSentEvent] = []
            var said = false
            for await event in events {
                after.append(event)
                if event.event == "reset", !said {
                    said = true
                    _ = try await member.say("new")
                }
                if event.event == "message", event.data.contains("\"text\":\"new\"") { break }
            }
            let reset = try #require(after.first { $0.event == "reset" })
            let data = try ChatProtocol.makeDecoder().decode(ChatHistoryReset.self, from: Data(reset.data.utf8))
            #expect(data.previousEpoch == oldEpoch && data.epoch != oldEpoch)
            #expect(reset.id == "\(data.epoch):0")
            #expect(after.filter { $0.event == "message" }.allSatisfy { $0.id?.hasPrefix(data.epoch + ":") == true })
            #expect(!after.contains { $0.data.contains("\"text\":\"old\"") }, "nothing from the old epoch is replayed")
            await member.leave()
            await sse.terminate()
            box.process.withLockedValue { $0 }?.signal(SIGTERM)
        }
    }
}

@Suite("ChatClient and a server close of 1000")
struct NormalClosureTests {
    @Test("a joined ChatClient closed with 1000 by the server rejoins and loses nothing; after leave() it stays closed")
    func rejoinsAfterServerNormalClosure() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                let url = server.webSocketURL("/chat/normal")
                let alice = ChatClient(url: url, name: "alice", configuration: EpochTests.calm)
                let bob = ChatClient(url: url, name: "bob", configuration: EpochTests.calm)
                let bobEvents = bob.events
                _ = try await alice.join()
                _ = try await bob.join()
                #expect(server.server.closeConnections(.room("normal"), code: .normalClosure) == 2)
                _ = try await alice.say("after the 1000")
                let heard = try await bobEvents.first(within: .seconds(20)) { event in
                    if case .message(let message) = event { return message.text == "after the 1000" }
                    return false
                }
                if case .message(let message) = heard { #expect(message.from == "alice") }
                await alice.leave()
                await bob.leave()
            }
        }
    }

    @Test("after a server 1000, a ChatClient whose first rejoin fails keeps trying with the strategy's delays, and rejoins once the server is back")
    func keepsRejoiningAfterFailedAttempts() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                let proxy = try await FaultProxy.start(upstreamPort: server.port)
                let url = URL(string: "ws://127.0.0.1:\(proxy.port)/chat/refused-rejoin")!
                var slow = EpochTests.calm
                slow.reconnection = .fixedDelay(.milliseconds(400))
                slow.connectTimeout = .seconds(10)
                let alice = ChatClient(url: url, name: "alice", configuration: slow)
                let bob = ChatClient(url: server.webSocketURL("/chat/refused-rejoin"), name: "bob", configuration: EpochTests.calm)
                let aliceEvents = alice.events
                let bobEvents = bob.events
                _ = try await alice.join()
                _ = try await bob.join()
                #expect(server.server.closeConnections(.room("refused-rejoin"), code: .normalClosure) == 2)
                var disconnections = 0
                var reset: FaultProxy.ToxicID?
                // The 1000, then at least two refused attempts while the path resets every connection.
                for await event in aliceEvents {
                    guard case .disconnected(_, let reconnecting) = event else { continue }
                    #expect(reconnecting)
                    disconnections += 1
                    if disconnections == 1 { reset = proxy.add(.resetPeer, direction: .both) }
                    if disconnections == 3 { break }
                }
                try proxy.remove(#require(reset))
                _ = try await aliceEvents.first(within: .seconds(10)) { event in
                    if case .welcome(_, let resumed) = event { return resumed }
                    return false
                }
                _ = try await alice.say("back after refusals")
                let heard = try await bobEvents.first(within: .seconds(10)) { event in
                    if case .message(let message) = event { return message.text == "back after refusals" }
                    return false
                }
                if case .message(let message) = heard { #expect(message.from == "alice") }
                await alice.leave()
                await bob.leave()
                await proxy.stop()
            }
        }
    }
}
