@testable import Duplex
import DuplexSchema
import DuplexPostgres
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import TestSupport
import Testing

/// Several `duplex-server` processes on one throwaway PostgreSQL cluster (issue 14): members
/// spread across the nodes see every message once, in seq order, across a node kill and a
/// database restart.
@Suite(
    "PostgreSQL store: several duplex-server processes",
    .enabled(if: PostgresCluster.testsEnabled, Comment(rawValue: PostgresCluster.disabledReason)),
    // One cluster and its nodes at a time: each test starts a PostgreSQL server and two or three
    // server processes, and the rest of the suite runs beside them on few cores.
    .serialized
)
struct PostgresStoreTests {
    /// Short intervals, so that reconnections are quick.
    static let fast = WebSocketConfiguration(
        ping: PingConfig(pingInterval: .milliseconds(500), maxPingFailures: 2),
        reconnection: .fixedDelay(.milliseconds(50)),
        connectTimeout: .seconds(10)
    )

    /// A database of its own for one test, on the shared cluster.
    static func withDatabase(_ body: (PostgresCluster, String) async throws -> Void) async throws {
        let cluster = try await PostgresCluster.shared
        try await body(cluster, try await cluster.createDatabase())
    }

    /// A database whose schema a node created and left: for tests that call the store's SQL
    /// functions directly. `body` gets the cluster and the database's name.
    static func withSchema(_ body: (PostgresCluster, String) async throws -> Void) async throws {
        try await withDatabase { cluster, store in
            let (node, _) = try await node(store)
            node.signal(SIGTERM)
            try await node.waitForExit()
            try await body(cluster, String(store.split(separator: "/").last ?? ""))
        }
    }

    /// Starts a node on the database; returns it and its port.
    static func node(_ store: String, _ arguments: [String] = []) async throws -> (CLIProcess, Int) {
        let (process, port) = try await CLIProcess.server(["--store", store, "--log-level", "notice"] + arguments)
        return (process, port)
    }

    static func chatURL(_ port: Int, _ room: String) -> URL {
        URL(string: "ws://127.0.0.1:\(port)/chat/\(room)")!
    }

    /// What one member saw: messages in arrival order, and whether the client reported a gap or
    /// a lost history.
    struct Seen: Sendable {
        var messages: [ChatMessage] = []
        var missed = 0
        var resets = 0

        var texts: [String] { messages.map(\.text) }

        /// Every seq seen is greater than the one before.
        var inSeqOrder: Bool { zip(messages, messages.dropFirst()).allSatisfy { $0.seq < $1.seq } }
    }

    /// Reads `events` until `done` holds for what was seen.
    static func collect(_ events: AsyncStream<ChatEvent>, within limit: Duration = .seconds(60), until done: @escaping @Sendable (Seen) -> Bool)
        async throws -> Seen
    {
        try await withTimeout(limit) {
            var seen = Seen()
            for await event in events {
                switch event {
                case .message(let message): seen.messages.append(message)
                case .missed: seen.missed += 1
                case .historyReset: seen.resets += 1
                default: break
                }
                if done(seen) { return seen }
            }
            throw StreamEndedError()
        }
    }

    @Test("three nodes, two members on each, all talking at once: every member sees every message exactly once, in seq order")
    func exactlyOnceAcrossThreeNodes() async throws {
        try await withTimeout(.seconds(180)) {
            try await Self.withDatabase { _, store in
                // Started together on a new database: they migrate it at the same time.
                async let first = Self.node(store)
                async let second = Self.node(store)
                async let third = Self.node(store)
                let nodes = try await [first, second, third]
                let members = (0..<6).map { index in
                    ChatClient(url: Self.chatURL(nodes[index % 3].1, "busy"), name: "m\(index)", configuration: Self.fast)
                }
                let perMember = 15
                let total = members.count * perMember
                let streams = members.map(\.events)
                for member in members { _ = try await member.join() }
                try await withThrowingTaskGroup(of: Seen.self) { group in
                    for stream in streams {
                        group.addTask { try await Self.collect(stream) { $0.messages.count >= total } }
                    }
                    try await withThrowingTaskGroup(of: Void.self) { senders in
                        for member in members {
                            senders.addTask {
                                for i in 1...perMember { _ = try await member.say("\(member.name) \(i)") }
                            }
                        }
                        try await senders.waitForAll()
                    }
                    var views: [[String]] = []
                    for try await seen in group {
                        #expect(seen.messages.count == total, "every message, and no more")
                        #expect(Set(seen.texts).count == total, "none twice")
                        #expect(seen.inSeqOrder, "in seq order")
                        #expect(seen.missed == 0 && seen.resets == 0)
                        views.append(seen.texts)
                    }
                    #expect(Set(views.map { $0.joined(separator: "|") }).count == 1, "every member saw the same order")
                }
                // Each node applied the others' messages from notifications, and timed it against
                // the database's clock: seconds, not the clocks' difference since 1970.
                for (_, port) in nodes {
                    let metrics = try await HTTPProbe.get(port: port, "/metrics")
                    let lags = try #require(Self.sample("duplex_store_notify_lag_seconds_count", in: metrics), "\(metrics)")
                    let sum = try #require(Self.sample("duplex_store_notify_lag_seconds_sum", in: metrics))
                    #expect(lags > 0, "\(metrics)")
                    #expect(sum >= 0 && sum / lags < 10, "\(metrics)")
                }
                for member in members {
                    #expect(await member.waitForDelivery(timeout: .seconds(20)))
                    await member.leave()
                }
                for (process, _) in nodes { process.signal(SIGTERM) }
            }
        }
    }

    @Test(
        "group commit: 64 says pipelined by each of two members share commits; each member's are numbered and acknowledged in the order sent, each message once, and a resent batch is all duplicates"
    )
    func pipelinedSaysShareCommits() async throws {
        try await withTimeout(.seconds(90)) {
            try await Self.withDatabase { _, store in
                let (node, port) = try await Self.node(store)
                let alice = try await RawChatMember.join(URL(string: "ws://127.0.0.1:\(port)/chat/batch?name=alice")!)
                let bob = try await RawChatMember.join(URL(string: "ws://127.0.0.1:\(port)/chat/batch?name=bob")!)
                let count = 64
                // Each member sends its 64 says at once, without waiting for acks.
                func sendAll(_ member: RawChatMember) async throws {
                    for i in 1...count {
                        try await member.socket.send(
                            .string(
                                try ChatClientFrame.say(ChatSay(clientMessageID: "\(member.welcome.name)-\(i)", text: "\(member.welcome.name) \(i)"))
                                    .jsonString()))
                    }
                }
                try await sendAll(alice)
                try await sendAll(bob)
                for member in [alice, bob] {
                    let name = member.welcome.name
                    let (messages, acks) = try await member.messagesAndAcks(until: count, messages: 2 * count)
                    // Every message of both, once each, in seq order.
                    #expect(messages.map(\.seq) == messages.map(\.seq).sorted())
                    #expect(Set(messages.map(\.text)).count == 2 * count)
                    // Its own: numbered in the order sent, acknowledged in that order.
                    let own = messages.filter { $0.from == name }
                    #expect(own.map(\.text) == (1...count).map { "\(name) \($0)" })
                    #expect(acks.map(\.clientMessageID) == (1...count).map { "\(name)-\($0)" })
                    #expect(acks.map(\.seq) == own.map(\.seq), "each ack carries its message's seq")
                }
                let health = try await HTTPProbe.get(port: port, "/health")
                let commits = try #require(Self.commits(in: health), "\(health)")
                #expect(commits.messages == 2 * count, "\(health)")
                #expect(commits.batches < commits.messages && commits.largest > 1, "messages shared commits: \(health)")
                // GET /metrics counts the same commits: their number, the messages in them, the messages recorded.
                let metrics = try await HTTPProbe.get(port: port, "/metrics")
                #expect(Self.sample("duplex_store_commit_seconds_count", in: metrics) == Double(commits.batches), "\(metrics)")
                #expect(Self.sample("duplex_store_commit_messages_sum", in: metrics) == Double(2 * count))
                #expect(Self.sample("duplex_chat_messages_recorded_total", in: metrics) == Double(2 * count))
                // The same 64 again (a client that resends after a reconnection): all duplicates.
                try await sendAll(alice)
                let (_, again) = try await alice.messagesAndAcks(until: count)
                #expect(again.allSatisfy { $0.duplicate }, "resent messages are answered with their original seqs")
                await alice.socket.terminate()
                await bob.socket.terminate()
                node.signal(SIGTERM)
            }
        }
    }

    /// The value of `series` (`name` or `name{labels}`, as written) in a `GET /metrics` answer.
    static func sample(_ series: String, in exposition: String) -> Double? {
        for line in exposition.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1))
        }
        return nil
    }

    /// The `commits` counters of a node's `/health`.
    static func commits(in health: String) -> (batches: Int, messages: Int, largest: Int)? {
        let body = health.split(separator: "\r\n\r\n", maxSplits: 1).last.map(String.init) ?? health
        guard let start = body.firstIndex(of: "{"),
            let object = try? JSONSerialization.jsonObject(with: Data(body[start...].utf8)) as? [String: Any],
            let store = object["store"] as? [String: Any],
            let commits = store["commits"] as? [String: Int],
            let batches = commits["batches"], let messages = commits["messages"], let largest = commits["largest"]
        else { return nil }
        return (batches, messages, largest)
    }

    @Test("a say retried on another node with the member's token is answered with the original seq, marked duplicate")
    func retryOnAnotherNodeIsDeduplicated() async throws {
        try await withTimeout(.seconds(90)) {
            try await Self.withDatabase { _, store in
                let (a, portA) = try await Self.node(store)
                let (b, portB) = try await Self.node(store)
                let first = try await RawChatMember.join(URL(string: "ws://127.0.0.1:\(portA)/chat/dedupe?name=alice")!)
                let ack = try await first.say("m-1", "hello once")
                #expect(ack.duplicate != true)
                await first.socket.terminate()
                let token = try #require(first.welcome.resumeToken)
                let epoch = try #require(first.welcome.epoch)
                let again = try await RawChatMember.join(
                    URL(string: "ws://127.0.0.1:\(portB)/chat/dedupe?name=alice&token=\(token)&since=\(ack.seq)&epoch=\(epoch)")!
                )
                #expect(again.welcome.epoch == epoch && again.welcome.recovered == true)
                let retried = try await again.say("m-1", "hello once")
                #expect(retried.seq == ack.seq && retried.duplicate == true)
                let next = try await again.say("m-2", "hello twice")
                #expect(next.duplicate != true && next.seq > ack.seq)
                await again.socket.terminate()
                a.signal(SIGTERM)
                b.signal(SIGTERM)
            }
        }
    }

    @Test("SIGKILL of a node: its member rejoins another node through the balancer with since and epoch, and nothing is lost either way")
    func nodeKilled() async throws {
        try await withTimeout(.seconds(120)) {
            try await Self.withDatabase { _, store in
                let (a, portA) = try await Self.node(store)
                let (b, portB) = try await Self.node(store)
                // A balancer in front of node A; it sends new connections to B once A is gone.
                let balancer = try await FaultProxy.start(upstreamPort: portA)
                let alice = ChatClient(url: Self.chatURL(balancer.port, "failover"), name: "alice", configuration: Self.fast)
                let bob = ChatClient(url: Self.chatURL(portB, "failover"), name: "bob", configuration: Self.fast)
                let aliceEvents = alice.events
                let bobEvents = bob.events
                let aliceWelcomes = alice.events
                let welcome = try await alice.join()
                _ = try await bob.join()
                for i in 1...5 {
                    _ = try await alice.say("alice \(i)")
                    _ = try await bob.say("bob \(i)")
                }
                #expect(await alice.waitForDelivery(timeout: .seconds(20)))
                balancer.setUpstream(port: portB)
                a.signal(SIGKILL)
                _ = try await a.waitForExit()
                // Bob goes on talking while alice is away; alice says one more unacknowledged.
                for i in 6...15 { _ = try await bob.say("bob \(i)") }
                _ = try await alice.say("alice 6")
                let rejoined = try await aliceWelcomes.first(within: .seconds(60)) { event in
                    if case .welcome(_, resumed: true) = event { return true }
                    return false
                }
                guard case .welcome(let second, _) = rejoined else { throw StreamEndedError() }
                #expect(second.epoch == welcome.epoch, "the same epoch: the history is in PostgreSQL")
                #expect(second.recovered == true)
                for i in 7...10 { _ = try await alice.say("alice \(i)") }
                async let aliceSaw = Self.collect(aliceEvents) { seen in seen.texts.contains("bob 15") }
                async let bobSaw = Self.collect(bobEvents) { seen in seen.texts.contains("alice 10") }
                let (fromBob, fromAlice) = try await (aliceSaw, bobSaw)
                #expect(fromBob.texts.filter { $0.hasPrefix("bob") } == (1...15).map { "bob \($0)" }, "\(fromBob.texts)")
                #expect(fromAlice.texts.filter { $0.hasPrefix("alice") } == (1...10).map { "alice \($0)" }, "\(fromAlice.texts)")
                #expect(fromBob.inSeqOrder && fromAlice.inSeqOrder)
                #expect(fromBob.missed == 0 && fromBob.resets == 0 && fromAlice.missed == 0 && fromAlice.resets == 0)
                #expect(await alice.waitForDelivery(timeout: .seconds(20)))
                await alice.leave()
                await bob.leave()
                await balancer.stop()
                b.signal(SIGTERM)
            }
        }
    }

    @Test("a killed node's member that never comes back is removed when the node's lease runs out: the others see it leave, and its name is free")
    func leaseExpiry() async throws {
        try await withTimeout(.seconds(90)) {
            try await Self.withDatabase { _, store in
                let (a, portA) = try await Self.node(store, ["--store-lease", "1"])
                let (b, portB) = try await Self.node(store, ["--store-lease", "1"])
                let carol = try await RawChatMember.join(URL(string: "ws://127.0.0.1:\(portA)/chat/lease?name=carol")!)
                let bob = ChatClient(url: Self.chatURL(portB, "lease"), name: "bob", configuration: Self.fast)
                let bobEvents = bob.events
                let welcome = try await bob.join()
                #expect(welcome.members == ["bob", "carol"])
                a.signal(SIGKILL)
                _ = try await a.waitForExit()
                let left = try await bobEvents.first(within: .seconds(30)) { event in
                    if case .left(let presence) = event { return presence.name == "carol" }
                    return false
                }
                guard case .left(let presence) = left else { throw StreamEndedError() }
                #expect(presence.session == carol.welcome.session)
                #expect(bob.members == ["bob"])
                // The name is free: another connection, without carol's token, may take it.
                let newcomer = try await RawChatMember.join(URL(string: "ws://127.0.0.1:\(portB)/chat/lease?name=carol")!)
                #expect(newcomer.welcome.members == ["bob", "carol"])
                await newcomer.socket.terminate()
                await carol.socket.terminate()
                await bob.leave()
                b.signal(SIGTERM)
            }
        }
    }

    @Test(
        "a killed node's member's name, joined on the other node before its lease runs out: name_taken and 1008 without the token, the member back at once with it"
    )
    func nameOfKilledNodesMember() async throws {
        try await withTimeout(.seconds(90)) {
            try await Self.withDatabase { _, store in
                let (a, portA) = try await Self.node(store)
                let (b, portB) = try await Self.node(store)
                let carol = try await RawChatMember.join(URL(string: "ws://127.0.0.1:\(portA)/chat/held?name=carol")!)
                let token = try #require(carol.welcome.resumeToken)
                a.signal(SIGKILL)
                _ = try await a.waitForExit()
                // A's lease (10 s by default) still holds carol's name: without her token it is taken.
                let refusal = try await Self.refusal(URL(string: "ws://127.0.0.1:\(portB)/chat/held?name=carol")!)
                #expect(refusal.error?.code == .nameTaken, "\(refusal)")
                #expect(refusal.close == .policyViolation, "\(refusal)")
                // With it, carol is back at once, the same member in the same room.
                let back = try await RawChatMember.join(URL(string: "ws://127.0.0.1:\(portB)/chat/held?name=carol&token=\(token)")!)
                #expect(back.welcome.resumeToken == token)
                #expect(back.welcome.epoch == carol.welcome.epoch)
                #expect(back.welcome.members == ["carol"])
                await back.socket.terminate()
                await carol.socket.terminate()
                b.signal(SIGTERM)
            }
        }
    }

    /// What a refused join gets: its error frame and the close code.
    static func refusal(_ url: URL) async throws -> (error: ChatErrorFrame?, close: WebSocketCloseCode?) {
        let socket = WebSocket(url: url)
        let events = socket.events
        try await socket.connect()
        defer { Task { await socket.terminate() } }
        return try await withTimeout(.seconds(20)) {
            var error: ChatErrorFrame?
            for await event in events {
                switch event {
                case .message(.string(let text)):
                    switch try ChatServerFrame.decode(Data(text.utf8)) {
                    case .error(let frame): error = frame
                    case let other: Issue.record("not refused: \(other)")
                    }
                case .disconnected(let code, _):
                    return (error, code)
                default:
                    continue
                }
            }
            throw StreamEndedError()
        }
    }

    @Test("PostgreSQL restarted under two nodes: both report the outage and the recovery, and members go on with nothing lost")
    func databaseRestart() async throws {
        try await withTimeout(.seconds(150)) {
            try await Self.withDatabase { cluster, store in
                let (a, portA) = try await Self.node(store)
                let (b, portB) = try await Self.node(store)
                let alice = ChatClient(url: Self.chatURL(portA, "outage"), name: "alice", configuration: Self.fast)
                let bob = ChatClient(url: Self.chatURL(portB, "outage"), name: "bob", configuration: Self.fast)
                let bobEvents = bob.events
                let aliceEvents = alice.events
                _ = try await alice.join()
                _ = try await bob.join()
                _ = try await alice.say("before")
                #expect(await alice.waitForDelivery(timeout: .seconds(20)))
                try await cluster.stop()
                try await a.waitForStderr("lost the database connection", within: .seconds(30))
                try await b.waitForStderr("lost the database connection", within: .seconds(30))
                // Said while the database is down: not acknowledged, kept, and resent.
                _ = try await alice.say("during")
                try await cluster.startServer()
                try await a.waitForStderr("database connection restored", within: .seconds(60))
                try await b.waitForStderr("database connection restored", within: .seconds(60))
                #expect(await alice.waitForDelivery(timeout: .seconds(60)), "the message said during the outage is delivered after it")
                _ = try await bob.say("after")
                let fromAlice: Seen
                let fromBob: Seen
                do {
                    fromAlice = try await Self.collect(bobEvents, within: .seconds(30)) { $0.texts.contains("during") }
                    fromBob = try await Self.collect(aliceEvents, within: .seconds(30)) { $0.texts.contains("after") }
                } catch {
                    Issue.record("node A: \(a.output.stderr)\nnode B: \(b.output.stderr)")
                    throw error
                }
                #expect(fromAlice.texts.filter { $0 == "during" }.count == 1)
                #expect(fromAlice.texts.first == "before" && fromAlice.missed == 0 && fromAlice.resets == 0)
                #expect(fromBob.missed == 0 && fromBob.resets == 0 && fromBob.inSeqOrder)
                let health = try await HTTPProbe.get(port: portA, "/health")
                #expect(health.contains(#""listening":true"#) && !health.contains(#""reconnections":0"#), "\(health)")
                let metrics = try await HTTPProbe.get(port: portA, "/metrics")
                #expect((Self.sample("duplex_store_reconnections_total", in: metrics) ?? 0) >= 1, "\(metrics)")
                await alice.leave()
                await bob.leave()
                a.signal(SIGTERM)
                b.signal(SIGTERM)
            }
        }
    }

    @Test(
        "one node cut off from PostgreSQL while another goes on: when it is back it catches up from the table, and its member gets every message once, in order"
    )
    func partitionedNodeCatchesUp() async throws {
        try await withTimeout(.seconds(120)) {
            try await Self.withDatabase { cluster, store in
                // Node B reaches the database through a proxy that the test can cut.
                let proxy = try await FaultProxy.start(upstreamPort: cluster.port)
                let proxied = store.replacingOccurrences(of: ":\(cluster.port)/", with: ":\(proxy.port)/")
                let (a, portA) = try await Self.node(store)
                let (b, portB) = try await Self.node(proxied)
                let alice = ChatClient(url: Self.chatURL(portA, "partition"), name: "alice", configuration: Self.fast)
                let bob = ChatClient(url: Self.chatURL(portB, "partition"), name: "bob", configuration: Self.fast)
                let bobEvents = bob.events
                _ = try await alice.join()
                _ = try await bob.join()
                _ = try await alice.say("before")
                #expect(await alice.waitForDelivery(timeout: .seconds(20)))
                let cut = proxy.add(.resetPeer, direction: .both)
                try await b.waitForStderr("lost the database connection", within: .seconds(30))
                // Recorded through node A while node B hears nothing.
                for i in 1...10 { _ = try await alice.say("while cut \(i)") }
                #expect(await alice.waitForDelivery(timeout: .seconds(20)))
                proxy.remove(cut)
                try await b.waitForStderr("database connection restored", within: .seconds(60))
                let seen = try await Self.collect(bobEvents) { $0.texts.contains("while cut 10") }
                #expect(seen.texts == ["before"] + (1...10).map { "while cut \($0)" }, "\(seen.texts)")
                #expect(seen.inSeqOrder && seen.missed == 0 && seen.resets == 0)
                let health = try await HTTPProbe.get(port: portB, "/health")
                #expect(health.contains(#""listening":true"#) && !health.contains(#""caughtUpEvents":0,"#), "\(health)")
                let metrics = try await HTTPProbe.get(port: portB, "/metrics")
                #expect((Self.sample("duplex_store_caught_up_events_total", in: metrics) ?? 0) >= 10, "\(metrics)")
                await alice.leave()
                await bob.leave()
                await proxy.stop()
                a.signal(SIGTERM)
                b.signal(SIGTERM)
            }
        }
    }

    @Test("a room's SSE stream on one node resumes on another from Last-Event-ID: exactly the events missed, no reset")
    func roomStreamAcrossNodes() async throws {
        try await withTimeout(.seconds(90)) {
            try await Self.withDatabase { _, store in
                let (a, portA) = try await Self.node(store)
                let (b, portB) = try await Self.node(store)
                let member = ChatClient(url: Self.chatURL(portB, "watched"), name: "m", configuration: Self.fast)
                let epoch = try #require(try await member.join().epoch)
                // From the start of the epoch: the stream may be subscribed after the first says.
                let first = ServerSentEventManager(
                    request: SSERequest(url: URL(string: "http://127.0.0.1:\(portA)/chat/watched/events")!),
                    configuration: .init(connectTimeout: .seconds(10)),
                    lastEventID: "\(epoch):0"
                )
                let events = first.events
                try await first.connect()
                for i in 1...3 { _ = try await member.say("one \(i)") }
                var seen: [ServerSentEvent] = []
                for await event in events {
                    seen.append(event)
                    if event.data.contains(#""text":"one 3""#) { break }
                }
                await first.terminate()
                let last = try #require(seen.last?.id)
                for i in 1...2 { _ = try await member.say("two \(i)") }
                #expect(await member.waitForDelivery(timeout: .seconds(20)))
                let second = ServerSentEventManager(
                    request: SSERequest(url: URL(string: "http://127.0.0.1:\(portB)/chat/watched/events")!),
                    configuration: .init(connectTimeout: .seconds(10)),
                    lastEventID: last
                )
                let resumed = second.events
                try await second.connect()
                var after: [ServerSentEvent] = []
                for await event in resumed {
                    after.append(event)
                    if event.data.contains(#""text":"two 2""#) { break }
                }
                #expect(!after.contains { $0.event == "reset" })
                let texts = after.filter { $0.event == "message" }.compactMap { event -> String? in
                    guard case .message(let message)? = try? ChatServerFrame.decode(Data(event.data.utf8)) else { return nil }
                    return message.text
                }
                #expect(texts == ["two 1", "two 2"], "\(after.map(\.data))")
                #expect(after.allSatisfy { $0.id?.hasPrefix(String(last.split(separator: ":")[0]) + ":") ?? true })
                await second.terminate()
                await member.leave()
                a.signal(SIGTERM)
                b.signal(SIGTERM)
            }
        }
    }

    @Test("one node restarted on the same database (SIGKILL, then a new process): the room keeps its epoch and its history")
    func singleNodeRestart() async throws {
        try await withTimeout(.seconds(90)) {
            try await Self.withDatabase { _, store in
                let (old, port) = try await Self.node(store)
                let alice = try await RawChatMember.join(URL(string: "ws://127.0.0.1:\(port)/chat/kept?name=alice")!)
                for i in 1...3 { _ = try await alice.say("k-\(i)", "kept \(i)") }
                let epoch = try #require(alice.welcome.epoch)
                old.signal(SIGKILL)
                _ = try await old.waitForExit()
                let (new, newPort) = try await Self.node(store)
                let watcher = try await RawChatMember.join(URL(string: "ws://127.0.0.1:\(newPort)/chat/kept?name=watcher&since=0&epoch=\(epoch)")!)
                #expect(watcher.welcome.epoch == epoch && watcher.welcome.recovered == true)
                let replayed = try await watcher.messages(until: "kept 3")
                #expect(replayed.map(\.text) == ["kept 1", "kept 2", "kept 3"])
                await watcher.socket.terminate()
                new.signal(SIGTERM)
            }
        }
    }

    @Test(
        "duplex_append_batch and duplex_append keep a room's newest events and their keys, trimming only what left the window, and everything older about once every 1,024 events"
    )
    func trimming() async throws {
        try await withTimeout(.seconds(90)) {
            try await Self.withSchema { cluster, name in
                _ = try await cluster.psql(name, "INSERT INTO duplex_rooms (room, epoch) VALUES ('r', 'E')")
                // Batches of two messages each, `batches` of them, keeping `keep`.
                let append = { (batches: Int, keep: Int, first: Int) in
                    """
                    DO $$ BEGIN FOR i IN \(first) .. \(first + batches - 1) LOOP
                    PERFORM * FROM duplex_append_batch(ARRAY['r', 'r'], ARRAY['{"seq":', '{"seq":'], ARRAY['}', '}'],
                        ARRAY['t' || i || 'a', 't' || i || 'b'], ARRAY['n' || i || 'a', 'n' || i || 'b'], ARRAY[false, false], \(keep));
                    END LOOP; END $$
                    """
                }
                let kept = { () async throws -> String in
                    try await cluster.psql(
                        name,
                        "SELECT (SELECT count(*) || ',' || min(seq) || ',' || max(seq) FROM duplex_events WHERE room = 'r') || ';' || (SELECT count(*) || ',' || min(seq) FROM duplex_dedupe WHERE room = 'r')"
                    ).trimmingCharacters(in: .whitespacesAndNewlines)
                }
                _ = try await cluster.psql(name, append(500, 500, 1))
                #expect(try await kept() == "500,501,1000;1000,501", "seqs 501 to 1000 kept, with both keys of each")
                // The kept length shrinks: each batch trims only what left the window of 100...
                _ = try await cluster.psql(name, append(10, 100, 501))
                #expect(try await kept() == "500,501,1020;1000,501", "seqs 901 to 920 trimmed, 501 to 900 left for the sweep")
                // ...until seq 1,024 passes, when everything older goes.
                _ = try await cluster.psql(name, append(5, 100, 511))
                #expect(try await kept() == "100,931,1030;200,931")
                // A single event (a join) trims the same way: keeping 50, only seq 981 left the
                // window with it; 931 to 980 stay for the sweep.
                _ = try await cluster.psql(name, "SELECT * FROM duplex_append('r', 'joined', '{\"seq\":', '}', '{}', '{}', NULL, 50)")
                #expect(try await kept() == "100,931,1031;198,931")
            }
        }
    }

    @Test(
        "duplex_append_batch numbers each room's new messages in batch order, answers a recorded key with its original seq, and gives a missing room none"
    )
    func batchNumbering() async throws {
        try await withTimeout(.seconds(90)) {
            try await Self.withSchema { cluster, name in
                _ = try await cluster.psql(name, "INSERT INTO duplex_rooms (room, epoch, latest_seq) VALUES ('a', 'E', 0), ('b', 'E', 10)")
                let batch = { (rooms: [String], tokens: [String], names: [String], byName: [Bool]) in
                    let list = { (values: [String]) in "ARRAY[" + values.map { "'\($0)'" }.joined(separator: ",") + "]::text[]" }
                    return """
                        SELECT string_agg(o_index || ':' || coalesce(o_seq::text, '-') || (CASE WHEN o_duplicate THEN 'd' ELSE '' END), ' ' ORDER BY o_index)
                        FROM duplex_append_batch(\(list(rooms)), \(list(rooms.map { _ in "{\"seq\":" })), \(list(rooms.map { _ in "}" })),
                            \(list(tokens)), \(list(names)), ARRAY[\(byName.map(String.init).joined(separator: ","))]::boolean[], 100)
                        """
                }
                // Two rooms interleaved, and one that is not in the database.
                let first = try await cluster.psql(
                    name,
                    batch(
                        ["a", "b", "gone", "a", "b", "a"], ["t1", "t2", "t3", "t4", "t5", "t6"], ["n1", "n2", "n3", "n4", "n5", "n6"],
                        [false, false, false, false, false, false]))
                #expect(first.trimmingCharacters(in: .whitespacesAndNewlines) == "1:1 2:11 3:- 4:2 5:12 6:3")
                // Recorded keys: by token always, by name only when asked; the rest numbered on.
                let second = try await cluster.psql(
                    name, batch(["a", "a", "a", "b"], ["t1", "t9", "t10", "t11"], ["x", "n4", "n6", "n5"], [false, true, false, false]))
                #expect(second.trimmingCharacters(in: .whitespacesAndNewlines) == "1:1d 2:2d 3:4 4:13")
                let rows = try await cluster.psql(
                    name,
                    "SELECT string_agg(room || seq || ':' || json, ' ' ORDER BY room, seq) FROM duplex_events; SELECT string_agg(room || latest_seq, ' ' ORDER BY room) FROM duplex_rooms"
                )
                #expect(
                    rows.trimmingCharacters(in: .whitespacesAndNewlines)
                        == "a1:{\"seq\":1} a2:{\"seq\":2} a3:{\"seq\":3} a4:{\"seq\":4} b11:{\"seq\":11} b12:{\"seq\":12} b13:{\"seq\":13}\na4 b13"
                )
            }
        }
    }

    @Test("a message whose commit fails after its statement completed is neither acknowledged nor delivered, and its sender is closed to resend")
    func failedCommitIsNotAcknowledged() async throws {
        try await withTimeout(.seconds(90)) {
            try await Self.withDatabase { cluster, store in
                // A query timeout longer than the wait below: the failed commit must be seen as
                // it happens, not when the query's deadline passes.
                let (node, port) = try await Self.node(store, ["--store-query-timeout", "120"])
                let alice = try await RawChatMember.join(URL(string: "ws://127.0.0.1:\(port)/chat/commit?name=alice")!)
                _ = try await alice.say("ok-1", "recorded")
                // A deferred trigger runs at commit, after duplex_append_batch's rows were sent:
                // the commit of this one message fails.
                let name = String(store.split(separator: "/").last ?? "")
                _ = try await cluster.psql(
                    name,
                    """
                    CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN IF NEW.json LIKE '%fail at commit%' THEN RAISE EXCEPTION 'refused at commit'; END IF; RETURN NULL; END $$;
                    CREATE CONSTRAINT TRIGGER fail_at_commit AFTER INSERT ON duplex_events
                    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_at_commit();
                    """
                )
                let events = alice.socket.events
                try await alice.socket.send(.string(try ChatClientFrame.say(ChatSay(clientMessageID: "x", text: "fail at commit")).jsonString()))
                // The batch fails at once: its sender is closed with 1013 (store_unavailable), to
                // resend, before any ack or delivery of the message.
                let outcome = try await withTimeout(.seconds(30)) { () -> (acked: Bool, delivered: Bool, close: WebSocketCloseCode?) in
                    var (acked, delivered) = (false, false)
                    for await event in events {
                        switch event {
                        case .message(.string(let text)):
                            switch try? ChatServerFrame.decode(Data(text.utf8)) {
                            case .ack(let ack)? where ack.clientMessageID == "x": acked = true
                            case .message(let message)? where message.text == "fail at commit": delivered = true
                            default: break
                            }
                            if acked || delivered { return (acked, delivered, nil) }
                        case .disconnected(let code, _):
                            return (acked, delivered, code)
                        default:
                            continue
                        }
                    }
                    return (acked, delivered, nil)
                }
                #expect(!outcome.acked && !outcome.delivered, "\(outcome)")
                #expect(outcome.close == .tryAgainLater, "\(outcome)")
                #expect(try await cluster.psql(name, "SELECT count(*) FROM duplex_events WHERE json LIKE '%fail at commit%'").contains("0"))
                node.signal(SIGTERM)
            }
        }
    }

    @Test("--store: a URL it cannot use is refused before starting, with the reason; an unreachable database fails the start")
    func badStores() async throws {
        try await withTimeout(.seconds(60)) {
            let bogus = try CLIProcess("duplex-server", ["--port", "0", "--store", "mysql://x@y/z"])
            let refused = try await bogus.waitForExit()
            #expect(refused.status != 0 && refused.stderr.contains("postgres://"), "\(refused)")
            // DUPLEX_STORE is read as --store is.
            let fromEnvironment = try CLIProcess("duplex-server", ["--port", "0"], environment: ["DUPLEX_STORE": "redis://x@y/z"])
            let refusedToo = try await fromEnvironment.waitForExit()
            #expect(refusedToo.status != 0 && refusedToo.stderr.contains("--store") && refusedToo.stderr.contains("postgres://"), "\(refusedToo)")
            let refusing = try RefusingPort()
            let unreachable = try CLIProcess(
                "duplex-server", ["--port", "0", "--store", "postgres://duplex@127.0.0.1:\(refusing.port)/none", "--store-startup-timeout", "1"])
            let failed = try await unreachable.waitForExit(within: .seconds(50))
            #expect(failed.status != 0 && failed.stderr.contains("cannot reach the room store"), "\(failed)")
            withExtendedLifetime(refusing) {}
        }
    }

    @Test("a database a newer server migrated (schema version 99) is refused at start, and left as it was")
    func newerSchema() async throws {
        try await withTimeout(.seconds(90)) {
            try await Self.withDatabase { cluster, store in
                let (first, _) = try await Self.node(store)
                first.signal(SIGTERM)
                try await first.waitForExit()
                let name = String(store.split(separator: "/").last ?? "")
                _ = try await cluster.psql(name, "UPDATE duplex_schema SET version = 99")
                let older = try CLIProcess("duplex-server", ["--port", "0", "--store", store, "--store-startup-timeout", "30"])
                let refused = try await older.waitForExit(within: .seconds(20))
                #expect(refused.status != 0 && refused.stderr.contains("schema version 99, newer than this server's"), "\(refused)")
                #expect(try await cluster.psql(name, "SELECT version FROM duplex_schema").contains("99"), "the version is left as it was")
            }
        }
    }

    @Test("PostgresStoreConfiguration reads postgres:// URLs and refuses others with a reason")
    func urls() throws {
        let full = try PostgresStoreConfiguration(url: "postgres://duplex:s%40cret@db.local:6543/rooms?sslmode=require")
        #expect(
            full.host == "db.local" && full.port == 6543 && full.username == "duplex" && full.password == "s@cret" && full.database == "rooms"
                && full.requireTLS)
        #expect(full.redactedURL == "postgres://duplex:***@db.local:6543/rooms")
        let short = try PostgresStoreConfiguration(url: "postgresql://me@127.0.0.1")
        #expect(short.port == 5432 && short.database == nil && !short.requireTLS)
        #expect(try ChatStoreConfiguration(parsing: "memory") == .memory)
        #expect(throws: PostgresStoreConfiguration.URLError.self) { try PostgresStoreConfiguration(url: "postgres://127.0.0.1/db") }
        #expect(throws: PostgresStoreConfiguration.URLError.self) { try PostgresStoreConfiguration(url: "postgres://me@host/db?sslmode=verify-full") }
        #expect(throws: PostgresStoreConfiguration.URLError.self) { try ChatStoreConfiguration(parsing: "redis://x") }
    }
}

/// A chat member over a bare ``WebSocket``: joins, says, and reads frames one by one.
struct RawChatMember {
    let socket: WebSocket
    let welcome: ChatWelcome
    let frames: AsyncStream<WebSocketMessage>

    static func join(_ url: URL) async throws -> RawChatMember {
        let socket = WebSocket(url: url)
        let frames = socket.messages
        try await socket.connect()
        let first = try await frames.first(within: .seconds(20))
        guard case .string(let text) = first, case .welcome(let welcome) = try ChatServerFrame.decode(Data(text.utf8)) else {
            throw StreamEndedError()
        }
        return RawChatMember(socket: socket, welcome: welcome, frames: frames)
    }

    /// Says `text` with the client message id `id`; returns its ack.
    func say(_ id: String, _ text: String) async throws -> ChatAck {
        try await socket.send(.string(try ChatClientFrame.say(ChatSay(clientMessageID: id, text: text)).jsonString()))
        let reply = try await frames.first(within: .seconds(20)) { message in
            guard case .string(let text) = message, case .ack(let ack)? = try? ChatServerFrame.decode(Data(text.utf8)) else { return false }
            return ack.clientMessageID == id
        }
        guard case .string(let text) = reply, case .ack(let ack) = try ChatServerFrame.decode(Data(text.utf8)) else { throw StreamEndedError() }
        return ack
    }

    /// The messages and acks that arrive until `count` acks and `messages` messages have, in order.
    func messagesAndAcks(until count: Int, messages expected: Int = 0) async throws -> ([ChatMessage], [ChatAck]) {
        try await withTimeout(.seconds(30)) {
            var messages: [ChatMessage] = []
            var acks: [ChatAck] = []
            for await frame in frames {
                guard case .string(let text) = frame, let decoded = try? ChatServerFrame.decode(Data(text.utf8)) else { continue }
                switch decoded {
                case .message(let message): messages.append(message)
                case .ack(let ack): acks.append(ack)
                default: break
                }
                if acks.count == count, messages.count >= expected { return (messages, acks) }
            }
            throw StreamEndedError()
        }
    }

    /// The messages that arrive until one with the text `last`.
    func messages(until last: String) async throws -> [ChatMessage] {
        try await withTimeout(.seconds(20)) {
            var messages: [ChatMessage] = []
            for await frame in frames {
                guard case .string(let text) = frame, case .message(let message)? = try? ChatServerFrame.decode(Data(text.utf8)) else { continue }
                messages.append(message)
                if message.text == last { return messages }
            }
            throw StreamEndedError()
        }
    }
}
