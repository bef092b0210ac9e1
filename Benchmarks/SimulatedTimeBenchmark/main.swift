// The wall time of virtual time on a simulated network (DuplexTesting's withSimulatedNetwork):
// one client through an hour of a flapping server, 1,000 clients reconnecting after a restart (a
// reconnection storm), an SSE feed through an hour of outages, and an hour of a scripted route
// served in the Duplex server's own handler, with the size of each event log. Rounds
// interleaved, medians.
//
//   swift run -c release --package-path Benchmarks simulated-time-benchmark [ROUNDS]
import Duplex
import DuplexTesting
import Foundation
import Logging

let rounds = CommandLine.arguments.dropFirst().first.flatMap(Int.init) ?? 5
let quiet: Logger = {
    var logger = Logger(label: "benchmark")
    logger.logLevel = .critical
    return logger
}()

/// 20 ms ± 5 ms each way.
let link = FaultProxy.LinkProfile(
    name: "lan", downlink: .init(kilobitsPerSecond: nil, delay: .milliseconds(20), jitter: .milliseconds(5)),
    uplink: .init(kilobitsPerSecond: nil, delay: .milliseconds(20), jitter: .milliseconds(5)))

/// Exponential backoff from 1 s to 30 s, ±20 %.
let configuration = WebSocketConfiguration(
    reconnection: .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30), jitter: 0.2), logger: quiet)

/// One client, exponential backoff 1 s to 30 s (±20 %), a server down one minute in every two
/// for an hour, over a link of 20 ms ± 5 ms each way.
func flappingHour(seed: UInt64) async throws -> (lines: Int, bytes: Int, reconnections: Int) {
    try await withSimulatedNetwork(seed: seed, link: link) { network, clock in
        let server = network.server(host: "flappy.test")
        let socket = network.webSocket(url: "ws://flappy.test/", configuration: configuration)
        try await socket.connect()
        for _ in 0..<30 {
            server.restart(downFor: .seconds(60))
            try await clock.sleep(for: .seconds(120))
        }
        let log = network.eventLog
        return (network.eventLines.count, log.utf8.count, server.acceptedCount - 1)
    }
}

/// 1,000 clients connected, the server restarted with two minutes of downtime, four minutes of
/// virtual time for all of them to come back.
func storm(seed: UInt64) async throws -> (lines: Int, bytes: Int, back: Int) {
    try await withSimulatedNetwork(seed: seed, link: link) { network, clock in
        let server = network.server(host: "storm.test")
        let sockets = (0..<1_000).map { _ in network.webSocket(url: "ws://storm.test/", configuration: configuration) }
        for socket in sockets { try await socket.connect() }
        server.restart(downFor: .seconds(120))
        try await clock.sleep(for: .seconds(240))
        return (network.eventLines.count, network.eventLog.utf8.count, server.connectionCount)
    }
}

/// Counts what `stream` yields until it ends, in a task on the clock's executor.
func count<Element: Sendable>(_ stream: AsyncStream<Element>, on clock: TestClock) -> Task<Int, Never> {
    Task(executorPreference: clock.executor) {
        var count = 0
        for await _ in stream { count += 1 }
        return count
    }
}

/// An SSE feed for an hour: an event every 10 s, the server (retry: 5000) down ten minutes in
/// every twenty, the client resuming with Last-Event-ID after each outage.
func feedHour(seed: UInt64) async throws -> (lines: Int, bytes: Int, events: Int) {
    try await withSimulatedNetwork(seed: seed, link: link) { network, clock in
        let server = network.server(host: "feed.test")
        server.eventStreamRetry = .seconds(5)
        let feed = network.eventSource(
            url: "http://feed.test/events", retryPolicy: RetryPolicy(initialDelay: 1, maxDelay: 60, jitter: 0.1),
            configuration: SSEConfiguration(logger: quiet))
        let counted = count(feed.events, on: clock)
        try await feed.connect()
        for n in 1...360 {
            if n % 120 == 31 { server.restart(downFor: .seconds(600)) }
            try server.publish(ServerSentEvent(id: "\(n)", data: "{\"n\":\(n)}"))
            try await clock.sleep(for: .seconds(10))
        }
        await feed.terminate()
        return (network.eventLines.count, network.eventLog.utf8.count, await counted.value)
    }
}

/// An hour of a scripted route in the server's own WebSocket handler: a message every 10 s from
/// the route's `delay`s, the client pinging every 30 s, every frame journaled at its virtual time.
func routeHour(seed: UInt64) async throws -> (lines: Int, bytes: Int, messages: Int, journaled: Int) {
    try await withSimulatedNetwork(seed: seed, link: link) { network, clock in
        let server = network.server(host: "route.test")
        let actions = (1...360).flatMap { n in [ScriptAction.send("{\"n\":\(n)}"), .delay(.seconds(10))] }
        try server.serve([.webSocket("/quotes", onConnect: { socket in socket.run(actions) })])
        var pinging = WebSocketConfiguration(reconnection: .none, logger: quiet)
        pinging.ping = PingConfig(pingInterval: .seconds(30), maxPingFailures: 2)
        let socket = network.webSocket(url: "ws://route.test/quotes", configuration: pinging)
        let counted = count(socket.messages, on: clock)
        try await socket.connect()
        try await clock.sleep(for: .seconds(3600))
        await socket.terminate()
        return (network.eventLines.count, network.eventLog.utf8.count, await counted.value, server.journal.entries.count)
    }
}

func milliseconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1e3 + Double(duration.components.attoseconds) * 1e-15
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    return sorted[sorted.count / 2]
}

var hours: [Double] = []
var storms: [Double] = []
var feeds: [Double] = []
var routes: [Double] = []
for round in 1...rounds {
    let clock = ContinuousClock()
    var start = clock.now
    let hour = try await flappingHour(seed: UInt64(round))
    hours.append(milliseconds(clock.now - start))
    start = clock.now
    let crowd = try await storm(seed: UInt64(round))
    storms.append(milliseconds(clock.now - start))
    start = clock.now
    let feed = try await feedHour(seed: UInt64(round))
    feeds.append(milliseconds(clock.now - start))
    start = clock.now
    let route = try await routeHour(seed: UInt64(round))
    routes.append(milliseconds(clock.now - start))
    let one = String(
        format: "one client's hour %.1f ms (%d reconnections, log %d lines, %d bytes)", hours.last!, hour.reconnections, hour.lines, hour.bytes)
    let many = String(
        format: "1,000 clients' storm %.0f ms (%d back, log %d lines, %d bytes)", storms.last!, crowd.back, crowd.lines, crowd.bytes)
    let sse = String(format: "an SSE feed's hour %.1f ms (%d events, log %d lines, %d bytes)", feeds.last!, feed.events, feed.lines, feed.bytes)
    let scripted = String(
        format: "a scripted route's hour %.1f ms (%d messages, %d journal entries, log %d lines, %d bytes)", routes.last!, route.messages,
        route.journaled, route.lines, route.bytes)
    print("round \(round): \(one); \(many); \(sse); \(scripted)")
}
print(
    String(format: "medians of %d rounds: one client's hour %.1f ms; 1,000 clients' storm %.0f ms;", rounds, median(hours), median(storms))
        + String(format: " an SSE feed's hour %.1f ms; a scripted route's hour %.1f ms", median(feeds), median(routes)))
