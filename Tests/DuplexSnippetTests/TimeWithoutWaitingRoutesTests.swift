import Duplex
import DuplexTesting
import Foundation
import Testing

// The article's scripted route on a simulated server ("Your protocol's server, in virtual time").
@Test func aTokenExpiresAfterAnHour() async throws {
    try await withSimulatedNetwork(seed: 6) { network, clock in
        let server = network.server(host: "api.test")
        try server.serve([
            .webSocket("/quotes", onConnect: { socket in
                socket.run([.send("welcome"), .delay(.seconds(3600)), .close(code: 4001, reason: "token expired")])
            })
        ])
        let socket = network.webSocket(url: "ws://api.test/quotes", configuration: .init(reconnection: .none))
        try await socket.connect()
        try await clock.sleep(for: .seconds(3700))
        let close = try #require(server.journal.entries.last)
        #expect(close.kind == .close && close.code == 4001)
        #expect(close.at.timeIntervalSince1970 >= 3600)  // an hour of virtual time
    }
}
