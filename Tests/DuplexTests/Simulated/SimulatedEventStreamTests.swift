import Duplex
import DuplexSchema
import DuplexTesting
import Foundation
import Testing

/// Server-Sent Events on the simulated network: the server's `retry:`, `Last-Event-ID` across an
/// outage, `Retry-After` and the read timeout, in virtual time.
extension SimulatedTimeTests {
    /// A feed whose server asks for `retry: 5000` goes down for ten minutes after six events and
    /// publishes six more meanwhile; the client waits 5 s (the server's wish, not its own 1 s)
    /// doubling to its 60 s cap, then resumes with `Last-Event-ID: 6` and gets every event once,
    /// in order. The same seed gives the same log.
    @Test func sseResumesWithRetryAndLastEventIDAcrossATenMinuteOutage() async throws {
        let (log, received) = try await Self.feedOutage(seed: 21)
        #expect(received == (1...15).map(String.init), "every event once, in order: \(received)")
        let requests = log.filter { $0.contains(" GET /events") }
        #expect(requests.first?.hasSuffix("GET /events") == true, "the first request has no Last-Event-ID: \(requests)")
        #expect(requests.last?.hasSuffix("GET /events Last-Event-ID 6") == true, "\(requests)")
        // The waits the client chose, from a drop or a refusal to the next request: the server's
        // 5 s, doubling, up to the 60 s cap, each within the 10 % jitter.
        let waits = Self.retryWaits(log)
        #expect(waits.count >= 12, "\(waits)")
        #expect(waits.first.map { $0 >= .seconds(4.5) && $0 <= .seconds(5.5) } == true, "the first wait is the server's retry: \(waits)")
        for wait in waits {
            #expect(wait >= .seconds(4.5) && wait <= .seconds(66), "a wait of \(wait) is outside 5 s - 10% ... 60 s + 10%: \(log)")
        }
        #expect(waits.filter { $0 >= .seconds(54) }.count >= 6, "the waits reached their cap: \(waits)")
        // Resumed within one capped wait of the server's return, ten minutes after it went down.
        let down = try #require(Self.times(of: "server feed.test:80 down", in: log).first)
        let resumed = try #require(Self.times(of: "HTTP 200", in: log).last)
        #expect(resumed - down >= 600 && resumed - down <= 600 + 66, "resumed \(resumed - down) s after the server went down")

        let again = try await Self.feedOutage(seed: 21)
        #expect(again.log == log, "the same seed, the same log")
    }

    /// A feed's server, down for maintenance, answers 503 with `Retry-After: 120`: the client
    /// waits those two minutes (not its own 1 s) on the clock, then resumes.
    @Test func sseWaitsOutRetryAfter() async throws {
        try await withSimulatedNetwork(seed: 22, link: Self.link) { network, clock in
            let server = network.server(host: "busy.test")
            server.eventStreamAnswer = .init(status: 503, headers: ["Retry-After": "120"], body: "maintenance")
            var configuration = SSEConfiguration(logger: Self.quiet)
            configuration.retryOnServerErrors = true
            let feed = network.eventSource(
                url: "http://busy.test/events", retryPolicy: RetryPolicy(initialDelay: 1, maxDelay: 300, jitter: 0), configuration: configuration)
            var events = feed.events.makeAsyncIterator()
            // connect() returns once a stream is open: here, after the outage.
            let connecting = Task(executorPreference: clock.executor) { try await feed.connect() }
            try await clock.sleep(for: .seconds(30))
            server.eventStreamAnswer = nil
            try server.publish(ServerSentEvent(id: "1", data: "back"))
            try await clock.sleep(for: .seconds(100))
            try server.publish(ServerSentEvent(id: "2", data: "live"))
            #expect(await events.next()?.data == "live")
            try await connecting.value
            let log = network.eventLines
            let answers = Self.times(of: "HTTP 503", in: log)
            let opened = Self.times(of: "HTTP 200", in: log)
            #expect(answers.count == 1, "\(log)")
            let wait = try #require(opened.first) - (try #require(answers.first))
            #expect(wait >= 120 && wait <= 120.2, "the client waited \(wait) s after Retry-After: 120")
            #expect(server.lastEventIDsReceived == [nil, nil])
        }
    }

    /// The phone changes networks with a feed open: nothing arrives over the old path and no one
    /// is told; the client's read timeout (45 s) finds it, and it resumes after the last event.
    @Test func sseFindsADeadPathByItsReadTimeout() async throws {
        try await withSimulatedNetwork(seed: 23, link: Self.link) { network, clock in
            let server = network.server(host: "feed.test")
            let feed = network.eventSource(
                url: "http://feed.test/events", retryPolicy: RetryPolicy(initialDelay: 1, maxDelay: 30, jitter: 0),
                configuration: SSEConfiguration(logger: Self.quiet))
            var events = feed.events.makeAsyncIterator()
            try await feed.connect()
            try server.publish(ServerSentEvent(id: "1", data: "before"))
            #expect(await events.next()?.id == "1")
            network.switchPath()
            let switched = clock.now
            try server.publish(ServerSentEvent(id: "2", data: "lost on the old path"))
            #expect(await events.next()?.id == "2", "resent after the reconnection")
            let log = network.eventLines
            let timedOut = try #require(Self.times(of: "read timed out", in: log).first)
            #expect(abs(timedOut - Self.seconds(switched.offset) - 45) < 0.1, "\(log)")
            #expect(server.lastEventIDsReceived == [nil, "1"])
        }
    }

    /// The outage scenario; its log and the ids of the events the client received.
    static func feedOutage(seed: UInt64) async throws -> (log: [String], received: [String]) {
        try await withSimulatedNetwork(seed: seed, link: Self.link) { network, clock in
            let server = network.server(host: "feed.test")
            server.eventStreamRetry = .seconds(5)
            let feed = network.eventSource(
                url: "http://feed.test/events", retryPolicy: RetryPolicy(initialDelay: 1, maxDelay: 60, jitter: 0.1),
                configuration: SSEConfiguration(logger: Self.quiet))
            var events = feed.events.makeAsyncIterator()
            try await feed.connect()
            for n in 1...6 {
                try server.publish(ServerSentEvent(id: "\(n)", event: "tick", data: "{\"n\":\(n)}"))
                try await clock.sleep(for: .seconds(10))
            }
            server.restart(downFor: .seconds(600))
            for n in 7...12 {
                try await clock.sleep(for: .seconds(60))
                try server.publish(ServerSentEvent(id: "\(n)", event: "tick", data: "{\"n\":\(n)}"))
            }
            var received: [String] = []
            // Waits on the events themselves: time moves on until the client has resumed.
            for _ in 1...12 { received += await events.next().flatMap(\.id).map { [$0] } ?? [] }
            for n in 13...15 { try server.publish(ServerSentEvent(id: "\(n)", event: "tick", data: "{\"n\":\(n)}")) }
            for _ in 13...15 { received += await events.next().flatMap(\.id).map { [$0] } ?? [] }
            #expect(feed.serverRetry == .seconds(5))
            #expect(feed.lastEventID == "15")
            #expect(server.lastEventIDsReceived == [nil, "6"])
            return (network.eventLines, received)
        }
    }
}
