import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import TestSupport
import Testing

/// The real client against the real server over loopback, through faults, with no mocks.
@Suite("integration: reconnect, resume, terminate")
struct IntegrationTests {
    static let wait: Duration = .seconds(10)

    @Test("chat across repeated drops with since= resumes: every message exactly once, in order")
    func chatAcrossDrops() async throws {
        try await withTimeout(.seconds(40)) {
            try await withDuplexServer { server in
                let lastSeq = NIOLockedValueBox(0)
                let base = server.webSocketURL("/chat/resilient").absoluteString
                let reader = WebSocket(
                    url: URL(string: base + "?name=reader")!,
                    configuration: .init(reconnection: .fixedDelay(.milliseconds(20)))
                )
                reader.prepareRequest = { request in
                    var request = request
                    request.url = URL(string: base + "?name=reader&since=\(lastSeq.withLockedValue { $0 })")!
                    return request
                }
                let frames = WebSocketCodableChannel<ChatClientFrame, ChatServerFrame>(
                    socket: reader, decoder: { ChatProtocol.makeDecoder() }
                ).receiveResults()
                try await reader.connect()
                // The writer reconnects too, and resends each message until it is acked: the
                // same clientMessageId makes a resend safe (the server answers a duplicate ack).
                let writer = WebSocket(url: URL(string: base + "?name=writer")!, configuration: .init(reconnection: .fixedDelay(.milliseconds(20))))
                let acks = WebSocketCodableChannel<ChatClientFrame, ChatServerFrame>(
                    socket: writer, decoder: { ChatProtocol.makeDecoder() }
                ).receiveResults()
                let book = AckBook()
                let collecting = Task {
                    for await result in acks {
                        if case .success(.ack(let ack)) = result { await book.record(ack.clientMessageID) }
                    }
                }
                try await writer.connect()
                let total = 60
                let writing = Task {
                    for i in 1...total {
                        let frame = try ChatClientFrame.say(ChatSay(clientMessageID: "m\(i)", text: "\(i)")).jsonString()
                        repeat {
                            try? await writer.send(frame)
                        } while await !book.wait(for: "m\(i)", limit: .milliseconds(500))
                        if i % 15 == 0 { server.server.dropConnections(.room("resilient")) }
                    }
                }
                var texts: [String] = []
                var seqs: [Int] = []
                for await result in frames {
                    guard case .success(let frame) = result, case .message(let message) = frame else { continue }
                    lastSeq.withLockedValue { $0 = max($0, message.seq) }
                    if message.from == "writer" {
                        texts.append(message.text)
                        seqs.append(message.seq)
                    }
                    if texts.count == total { break }
                }
                try await writing.value
                collecting.cancel()
                #expect(texts == (1...total).map(String.init), "every message once, in order")
                #expect(seqs == seqs.sorted() && Set(seqs).count == seqs.count)
                await reader.terminate()
                await writer.terminate()
            }
        }
    }

    /// The acks a chat writer has received, and a way to wait for one with a time limit.
    actor AckBook {
        private var acked: Set<String> = []
        private var waiters: [String: CheckedContinuation<Bool, Never>] = [:]

        func record(_ id: String) {
            acked.insert(id)
            waiters.removeValue(forKey: id)?.resume(returning: true)
        }

        /// True once `id` is acked; false if `limit` passes first.
        func wait(for id: String, limit: Duration) async -> Bool {
            (try? await withTimeout(limit) { await self.acknowledged(id) }) == true
        }

        /// Waits for the ack of `id`; false when cancelled first.
        private func acknowledged(_ id: String) async -> Bool {
            if acked.contains(id) { return true }
            return await withTaskCancellationHandler {
                await withCheckedContinuation { continuation in
                    if Task.isCancelled { continuation.resume(returning: false) } else { waiters[id] = continuation }
                }
            } onCancel: {
                Task { await self.expire(id) }
            }
        }

        private func expire(_ id: String) {
            waiters.removeValue(forKey: id)?.resume(returning: false)
        }
    }

    @Test("reconnection waits the strategy's delays, within tolerance")
    func reconnectDelays() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: .init(reconnection: .fixedDelay(.milliseconds(300))))
                let states = socket.stateEvents
                let events = socket.events
                try await socket.connect()
                try await socket.send("warm")
                _ = try await events.first(within: Self.wait) { $0 == .message(.string("warm")) }
                // the client starts its timer after it notices the drop, so from the drop on it waits at least the delay
                let lost = ContinuousClock.now
                server.server.dropConnections(.route("echo"))
                _ = try await states.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
                _ = try await states.first(within: Self.wait) { if case .connected = $0 { true } else { false } }
                let waited = lost.duration(to: .now)
                #expect(waited >= .milliseconds(300), "the strategy's delay was honoured")
                await socket.terminate()
                // And no more than the strategy's delay was asked of the clock (an upper bound in
                // wall time would only measure how loaded the machine is).
                let clock = RecordingClock()
                let recorded = WebSocket(
                    request: WebSocketRequest(url: server.webSocketURL("/echo")),
                    configuration: .init(reconnection: .fixedDelay(.milliseconds(300))),
                    clock: clock
                )
                let recordedStates = recorded.stateEvents
                let recordedMessages = recorded.messages
                try await recorded.connect()
                // An echo first: once it comes back, the server has registered the connection,
                // so the drop reaches it (the 101 alone can come before).
                try await recorded.send("warm")
                _ = try await recordedMessages.first(within: Self.wait)
                #expect(server.server.dropConnections(.route("echo")) >= 1)
                _ = try await recordedStates.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
                _ = try await recordedStates.first(within: Self.wait) { if case .connected = $0 { true } else { false } }
                let asked = try #require(clock.sleeps.first)
                #expect(asked > .milliseconds(250) && asked <= .milliseconds(300), "one sleep of the strategy's 300 ms: \(clock.sleeps)")
                await recorded.terminate()
            }
        }
    }

    @Test("terminate during a reconnect backoff stops all retries and finishes every stream")
    func terminateDuringBackoff() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: .init(reconnection: .fixedDelay(.seconds(60))))
                let states = socket.stateEvents
                let events = socket.events
                let messages = socket.messages
                try await socket.connect()
                try await socket.send("warm")
                _ = try await events.first(within: Self.wait) { $0 == .message(.string("warm")) }
                server.server.dropConnections(.route("echo"))
                _ = try await states.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
                #expect(socket.state == .connecting, "waiting to reconnect")
                await socket.terminate()
                for await _ in messages {}
                // Every state after the drop, to the end of the stream: no connection was made.
                var after: [WebSocketState] = []
                for await state in states { after.append(state) }
                #expect(after.last == .disconnected(.terminated))
                #expect(!after.contains { if case .connected = $0 { true } else { false } }, "no reconnection was made: \(after)")
            }
        }
    }
}

@Suite("integration: server restart")
struct RestartIntegrationTests {
    @Test("a server restart gives the client 1001; it reconnects once the server is back on the same port, and SSE resumes exactly")
    func restart() async {
        await StepTrace.run(restartScenario)
    }

    private func restartScenario(_ trace: StepTrace) async throws {
        try await withTimeout(.seconds(90)) {
            try await withDuplexServer(configuration: .init(sseRetryMilliseconds: 20)) { server in
                // A short connect timeout and pings: an attempt that reaches the server as it stops
                // listening is closed unanswered, and one that waits for an answer that never comes
                // is retried instead of waited out. Each pong has a second: the event loops are
                // shared with every test running beside this one, and in a full parallel run one
                // has been seen to start a task half a second late (docs/conformance.md).
                let socket = WebSocket(
                    url: server.webSocketURL("/echo"),
                    configuration: .init(
                        ping: PingConfig(pingInterval: .milliseconds(1200), maxPingFailures: 2, pongTimeout: .seconds(1)),
                        reconnection: .fixedDelay(.milliseconds(50)),
                        connectTimeout: .seconds(10)
                    )
                )
                let events = socket.events
                let states = socket.stateEvents
                let sse = ServerSentEventManager(
                    url: server.httpURL("/events?interval=20"),
                    retryPolicy: RetryPolicy(initialDelay: 0.02, maxDelay: 0.2, jitter: 0),
                    configuration: .init(connectTimeout: .seconds(10))
                )
                let ticks = sse.events
                trace.enter("connect")
                try await socket.connect()
                try await sse.connect()
                trace.enter("echo before the restart")
                try await trace.echo("before", on: socket, events, within: .seconds(30))
                var received: [ServerSentEvent] = []
                trace.enter("3 SSE ticks before the restart")
                for await tick in ticks {
                    received.append(tick)
                    if received.count == 3 { break }
                }
                trace.enter("1001 from the restart")
                server.server.restart(downFor: .milliseconds(300))
                let closed = try await events.first(within: .seconds(30)) {
                    trace.saw($0); if case .disconnected = $0 { return true } else { return false }
                }
                #expect(closed == .disconnected(code: .goingAway, reason: "server shutting down"))
                trace.enter("connected state after the restart")
                _ = try await states.first(within: .seconds(30)) {
                    trace.saw($0); if case .connected = $0 { return true } else { return false }
                }
                // Sent once, on the connection the client reports: a connection that reached the
                // server as it stopped was closed unanswered (no 101), so this one is the new
                // listener's.
                trace.enter("echo after the restart")
                try await trace.echo("after", on: socket, events, within: .seconds(30))
                trace.enter("SSE ticks after the restart")
                for await tick in ticks {
                    received.append(tick)
                    if received.count == 30 { break }
                }
                let ids = received.compactMap { $0.id.flatMap { Int64($0) } }
                #expect(ids == Array(ids[0]..<(ids[0] + Int64(ids.count))), "no gap and no duplicate across the restart")
                #expect(try await server.server.port() == server.port)
                trace.enter("terminate")
                await socket.terminate()
                await sse.terminate()
            }
        }
    }
}
