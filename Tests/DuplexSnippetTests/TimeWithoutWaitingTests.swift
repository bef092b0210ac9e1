import Duplex
import DuplexTesting
import Testing

@Test func reconnectsThroughAnHourOfOutages() async throws {
    try await withSimulatedNetwork(seed: 42, link: .lossyWiFi) { network, clock in
        let server = network.server(host: "chat.test")
        let configuration = WebSocketConfiguration(
            reconnection: .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30)))
        let socket = network.webSocket(url: "ws://chat.test/", configuration: configuration)
        try await socket.connect()
        for _ in 0..<30 {
            server.restart(downFor: .seconds(60))  // down one minute in every two
            try await clock.sleep(for: .seconds(120))  // no real time passes
        }
        #expect(socket.state == .connected(protocol: nil))
        #expect(server.acceptedCount == 31)
    }
}

// The article's log: its first lines, for seed 42 over lossy Wi-Fi, are what the article shows.
@Test func theArticlesLog() async throws {
    let lines = try await withSimulatedNetwork(seed: 42, link: .lossyWiFi) { network, clock in
        let server = network.server(host: "chat.test")
        let configuration = WebSocketConfiguration(
            reconnection: .exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(30)))
        let socket = network.webSocket(url: "ws://chat.test/", configuration: configuration)
        try await socket.connect()
        server.restart(downFor: .seconds(60))
        try await clock.sleep(for: .seconds(2))
        return network.eventLines
    }
    #expect(
        Array(lines.prefix(12)) == [
            "0.000s c1 state notConnected",
            "0.000s c1 state connecting",
            "0.000s c1#1 connect ws://chat.test/",
            "0.014s c1#1 open",
            "0.014s c1 state connected",
            "0.014s server chat.test:80 down",
            "0.019s c1#1 closed with no close frame",
            "0.019s c1 state disconnected(error(connectionLost: the server went away (simulated)))",
            "1.050s timer set at 0.019s fires",
            "1.050s c1 state connecting",
            "1.050s c1#2 connect ws://chat.test/",
            "1.062s c1#2 refused",
        ])
}

@Test func aPingUnanswered() async throws {
    try await withSimulatedNetwork(seed: 3) { network, clock in
        let server = network.server(host: "quiet.test")
        var configuration = WebSocketConfiguration(reconnection: .none)
        configuration.ping = PingConfig(pingInterval: .seconds(30), maxPingFailures: 3)
        let socket = network.webSocket(url: "ws://quiet.test/", configuration: configuration)
        try await socket.connect()
        try await clock.sleep(for: .seconds(7200))
        server.answersPings = false
        try await clock.sleep(for: .seconds(600))
        #expect(socket.state == .disconnected(.pingFailed(missedPings: 3)))
    }
}

@Test func aFeedResumesAfterTenMinutes() async throws {
    try await withSimulatedNetwork(seed: 5) { network, clock in
        let server = network.server(host: "feed.test")
        server.eventStreamRetry = .seconds(5)  // sent as retry: 5000
        let feed = network.eventSource(url: "http://feed.test/events")
        var events = feed.events.makeAsyncIterator()
        try await feed.connect()
        try server.publish(ServerSentEvent(id: "1", data: "first"))
        server.restart(downFor: .seconds(600))
        try server.publish(ServerSentEvent(id: "2", data: "while you were away"))
        #expect(await events.next()?.id == "1")
        #expect(await events.next()?.id == "2")  // resent after Last-Event-ID: 1
        #expect(server.lastEventIDsReceived == [nil, "1"])
        #expect(clock.now.offset > .seconds(600))
    }
}
