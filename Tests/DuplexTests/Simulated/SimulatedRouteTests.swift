import Duplex
import DuplexTesting
import Foundation
import Testing

/// Scripted routes on the simulated network: the Duplex server's own WebSocket handler and the
/// route's service, their timers on the network's clock, the journal at virtual times.
extension SimulatedTimeTests {
    /// A route that greets, waits ten minutes, sends again and closes with 4000: its `delay`
    /// runs on the clock, the client sees each message a link's delay after the journal says it
    /// was sent, and the close code is the route's.
    @Test func aScriptedRouteWaitsOnTheClock() async throws {
        let (log, journal) = try await Self.tenMinuteRoute(seed: 41)
        let entries = journal.map { "\($0.direction.rawValue) \($0.kind.rawValue) \($0.data ?? "") \($0.code.map(String.init) ?? "")" }
        // The client's answer completes the close handshake (the server journals no timeout
        // and no drop).
        #expect(entries == ["in open  ", "out text hello ", "out text ten minutes later ", "out close  4000"], "\(entries) \(log.suffix(12))")
        // The journal's times are the network's: the second message 600 s after the first.
        let sent = journal.filter { $0.kind == .text }.map { $0.at.timeIntervalSince1970 }
        #expect(sent.count == 2 && abs(sent[1] - sent[0] - 600) < 0.000_001, "\(sent)")
        #expect(sent.first.map { $0 > 0 && $0 < 1 } == true, "the first is sent within the first second: \(sent)")
        // The client reads each one the link's 20 ms ± 5 later.
        let received = Self.times(of: " ← text 17 bytes", in: log)
        #expect(received.count == 1 && received[0] - sent[1] >= 0.015 && received[0] - sent[1] <= 0.025, "\(received) \(sent)")
        #expect(log.contains { $0.hasSuffix(" closed 4000") }, "\(log.suffix(5))")
    }

    /// The same seed gives the same event log and the same journal, times included.
    @Test func aScriptedRouteRunsTheSameTwiceWithOneSeed() async throws {
        let first = try await Self.tenMinuteRoute(seed: 42)
        let second = try await Self.tenMinuteRoute(seed: 42)
        #expect(first.log == second.log)
        #expect(first.journal == second.journal)
    }

    /// A route that withholds pongs: the client's pings, 30 s apart, reach the route's journal
    /// at those times, and the client gives up after three, on the clock.
    @Test func aRouteThatWithholdsPongsFailsTheClientsPings() async throws {
        try await withSimulatedNetwork(seed: 43, link: Self.link) { network, clock in
            let server = network.server(host: "mute.test")
            try server.serve([.webSocket("/mute", answerPings: false)])
            var configuration = WebSocketConfiguration(reconnection: .none, logger: Self.quiet)
            configuration.ping = PingConfig(pingInterval: .seconds(30), maxPingFailures: 3)
            let socket = network.webSocket(url: "ws://mute.test/mute", configuration: configuration)
            try await socket.connect()
            try await clock.sleep(for: .seconds(600))
            guard case .disconnected(.pingFailed(let missed)) = socket.state else {
                Issue.record("still \(socket.state)")
                return
            }
            #expect(missed == 3)
            let pings = server.journal.entries.filter { $0.kind == .ping }.map { $0.at.timeIntervalSince1970 }
            #expect(pings.count == 3, "\(pings)")
            for (earlier, later) in zip(pings, pings.dropFirst()) {
                #expect(abs(later - earlier - 30) < 0.011, "pings 30 s apart (± the link's jitter): \(pings)")
            }
            #expect(!server.journal.entries.contains { $0.kind == .pong })
            // The client closed TCP: the route saw the connection go.
            let last = server.journal.entries.last
            #expect(last?.kind == .drop, "\(last.map(String.init(describing:)) ?? "none")")
        }
    }

    /// A route's refusal is the client's error, with its status, and is journaled.
    @Test func aRouteRefusalReachesTheClientWithItsStatus() async throws {
        try await withSimulatedNetwork(seed: 44, link: Self.link) { network, _ in
            let server = network.server(host: "closed.test")
            try server.serve([.webSocket("/members", accept: { _ in .refuse(status: 403, body: "no") })])
            let socket = network.webSocket(url: "ws://closed.test/members", configuration: .init(reconnection: .none, logger: Self.quiet))
            let error = await #expect(throws: WebSocketError.self) { try await socket.connect() }
            #expect(error?.code == .upgradeRejected && error?.status == 403, "\(String(describing: error))")
            #expect(server.journal.entries.map(\.kind) == [.refused])
            #expect(server.journal.entries.first?.code == 403)
        }
    }

    /// A route's subprotocol is chosen from what the client offers, and its `onMessage` answers;
    /// a path no route matches is echoed.
    @Test func aRouteAnswersBesideTheEcho() async throws {
        try await withSimulatedNetwork(seed: 45, link: Self.link) { network, _ in
            let server = network.server(host: "both.test")
            try server.serve([
                .webSocket(
                    "/rooms/:room", subprotocols: ["chat.v2"],
                    onMessage: { message, socket in
                        if case .text(let text) = message { try socket.send("\(socket.request.path): \(text)") }
                    })
            ])
            let configuration = WebSocketConfiguration(reconnection: .none, logger: Self.quiet)
            let routed = network.webSocket(url: "ws://both.test/rooms/7", protocols: ["chat.v1", "chat.v2"], configuration: configuration)
            let echoed = network.webSocket(url: "ws://both.test/other", configuration: configuration)
            let (routedMessages, echoedMessages) = (routed.messages, echoed.messages)
            try await routed.connect()
            try await echoed.connect()
            #expect(routed.state == .connected(protocol: "chat.v2"))
            try await routed.send("hi")
            try await echoed.send("hi")
            var routedIterator = routedMessages.makeAsyncIterator()
            var echoedIterator = echoedMessages.makeAsyncIterator()
            #expect(await routedIterator.next()?.text == "/rooms/7: hi")
            #expect(await echoedIterator.next()?.text == "hi")
            #expect(server.journal.entries.filter { $0.kind == .text }.map(\.data) == ["hi", "/rooms/7: hi"])
        }
    }

    /// The GraphQL preset's own timers on the clock: a client that never sends
    /// `connection_init` is closed with 4408 when the preset's 3-second init timeout runs out.
    @Test func aPresetsInitTimeoutRunsOnTheClock() async throws {
        try await withSimulatedNetwork(seed: 46, link: Self.link) { network, clock in
            let server = network.server(host: "graphql.test")
            try server.serve([try .graphQL("/graphql", script: GraphQLScript(operations: []))])
            let socket = network.webSocket(
                url: "ws://graphql.test/graphql", protocols: ["graphql-transport-ws"],
                configuration: .init(reconnection: .none, logger: Self.quiet))
            try await socket.connect()
            #expect(socket.state == .connected(protocol: "graphql-transport-ws"))
            try await clock.sleep(for: .seconds(10))
            let close = try #require(server.journal.entries.first { $0.kind == .close && $0.direction == .out })
            #expect(close.code == 4408)
            #expect(abs(close.at.timeIntervalSince1970 - 3) < 0.03, "closed at \(close.at.timeIntervalSince1970) s")
            #expect(network.eventLines.contains { $0.hasSuffix(" closed 4408") })
        }
    }

    /// A route's frame fault is read by the client's own engine: text that is not UTF-8 fails the
    /// connection with 1007, whose close frame the route journals.
    @Test func aRoutesFrameFaultFailsTheClientAsOnSockets() async throws {
        try await withSimulatedNetwork(seed: 50, link: Self.link) { network, clock in
            let server = network.server(host: "broken.test")
            try server.serve([.webSocket("/broken", onConnect: { socket in socket.run([.send("fine"), .fault(.invalidUTF8)]) })])
            let socket = network.webSocket(url: "ws://broken.test/broken", configuration: .init(reconnection: .none, logger: Self.quiet))
            var messages = socket.messages.makeAsyncIterator()
            try await socket.connect()
            #expect(await messages.next()?.text == "fine")
            try await clock.sleep(for: .seconds(10))
            guard case .disconnected(let reason) = socket.state else {
                Issue.record("still \(socket.state)")
                return
            }
            #expect("\(reason)" == "error(protocolViolation: a text message from the server is not UTF-8)", "\(reason)")
            let close = server.journal.entries.first { $0.kind == .close && $0.direction == .in }
            #expect(close?.code == 1007, "\(server.journal.entries.map(String.init(describing:)))")
        }
    }

    /// A scripted SSE route: an event every 30 s from the route's own timers (a minute would
    /// pass the client's 45 s read timeout: the client would drop and resume after each event),
    /// `retry: 5000`, then a drop; the client waits the route's 5 s and resumes with
    /// `Last-Event-ID: 6`, and the journal has each event at its time.
    @Test func aScriptedFeedRunsOnTheClock() async throws {
        try await withSimulatedNetwork(seed: 48, link: Self.link) { network, clock in
            let server = network.server(host: "feed.test")
            let events = (1...6).map { SSEScriptEvent(id: "\($0)", data: "tick \($0)") }
            try server.serve([.sse("/feed", script: SSEScript(events: events, every: .seconds(30), then: .drop, retryMilliseconds: 5_000))])
            let feed = network.eventSource(url: "http://feed.test/feed", configuration: SSEConfiguration(logger: Self.quiet))
            var received = feed.events.makeAsyncIterator()
            try await feed.connect()
            var data: [String] = []
            for _ in 1...6 { data.append(await received.next()?.data ?? "") }
            #expect(data == (1...6).map { "tick \($0)" })
            try await clock.sleep(for: .seconds(30))
            let sent = server.journal.entries.filter { $0.kind == .event }.map { $0.at.timeIntervalSince1970 }
            #expect(sent.count == 6, "\(sent)")
            for (earlier, later) in zip(sent, sent.dropFirst()) {
                #expect(abs(later - earlier - 30) < 0.000_001, "an event every 30 s: \(sent)")
            }
            #expect(server.lastEventIDsReceived.first == .some(nil))
            #expect(server.lastEventIDsReceived.dropFirst().first == "6", "\(server.lastEventIDsReceived)")
            let log = network.eventLines
            let dropped = try #require(Self.times(of: " dropped", in: log).first)
            let requests = Self.times(of: " GET /feed Last-Event-ID 6", in: log)
            let wait = try #require(requests.first) - dropped
            #expect(wait >= 4.5 && wait <= 5.5, "the client waited \(wait) s after the route's retry: 5000")
            await feed.terminate()
        }
    }

    /// A proxy route needs the real server and a real backend: serving one is refused, saying so.
    @Test func aSimulatedServerRefusesRoutesItCannotServe() async throws {
        try await withSimulatedNetwork(seed: 47, link: Self.link) { network, _ in
            let server = network.server(host: "front.test")
            let route = ScriptedRoute.proxy("/api", to: try #require(URL(string: "ws://127.0.0.1:9/api")))
            let error = #expect(throws: SimulatedRouteError.self) { try server.serve([route]) }
            #expect(error?.description.contains("withDuplexServer") == true)
        }
    }

    /// A simulation that ends with routes mid-script (a delay pending, a connection open, a feed
    /// mid-stream) ends as a server's shutdown would: each route sees its connection end, and
    /// its timers are let go of, not left behind.
    @Test func aSimulationEndsWithRoutesMidScript() async throws {
        let journals = try await withSimulatedNetwork(seed: 49, link: Self.link) { network, clock in
            let server = network.server(host: "busy.test")
            try server.serve([
                .webSocket("/slow", onConnect: { socket in socket.run([.send("soon"), .delay(.seconds(3600)), .send("later")]) }),
                .sse("/feed", script: SSEScript(events: (1...100).map { SSEScriptEvent(id: "\($0)", data: "\($0)") }, every: .seconds(10))),
            ])
            let socket = network.webSocket(url: "ws://busy.test/slow", configuration: .init(reconnection: .none, logger: Self.quiet))
            let feed = network.eventSource(url: "http://busy.test/feed", configuration: SSEConfiguration(logger: Self.quiet))
            try await socket.connect()
            try await feed.connect()
            try await clock.sleep(for: .seconds(60))
            return server.journal
        }
        // Let go of after the simulation: what the routes journaled as it ended.
        let kinds = journals.entries.map { "\($0.path) \($0.direction.rawValue) \($0.kind.rawValue)" }
        #expect(kinds.contains("/slow in drop"), "\(kinds)")
        #expect(kinds.contains("/feed in drop"), "\(kinds)")
        #expect(journals.entries.filter { $0.data == "later" }.isEmpty, "the pending delay never ran: \(kinds)")
    }

    /// Ten minutes of `/ticker`: hello, ten minutes' wait, one more message, close 4000.
    static func tenMinuteRoute(seed: UInt64) async throws -> (log: [String], journal: [ScriptJournal.Entry]) {
        try await withSimulatedNetwork(seed: seed, link: Self.link) { network, clock in
            let server = network.server(host: "ticker.test")
            try server.serve([
                .webSocket(
                    "/ticker",
                    onConnect: { socket in
                        socket.run([.send("hello"), .delay(.seconds(600)), .send("ten minutes later"), .close(code: 4000, reason: "")])
                    })
            ])
            let socket = network.webSocket(url: "ws://ticker.test/ticker", configuration: .init(reconnection: .none, logger: Self.quiet))
            try await socket.connect()
            try await clock.sleep(for: .seconds(700))
            #expect(socket.state != .connected(protocol: nil))
            #expect(server.connectionCount == 0, "the route closed it: the server no longer counts it")
            #expect(server.acceptedCount == 1)
            return (network.eventLines, server.journal.entries)
        }
    }
}
