import DuplexServer
import DuplexTesting
import Foundation
import Testing

@Suite("withDuplexServer")
struct WithDuplexServerTests {
    @Test("a server on a free port with URLs for its routes, gone once the body returns")
    func freePortAndURLs() async throws {
        let (port, stopped) = try await withTimeout {
            try await withDuplexServer { server in
                let url = server.webSocketURL("/echo")  // ws://127.0.0.1:<port>/echo
                #expect(url.absoluteString == "ws://127.0.0.1:\(server.port)/echo")
                #expect(server.httpURL("events?interval=10").absoluteString == "http://127.0.0.1:\(server.port)/events?interval=10")
                #expect(server.port != 8080 && server.port > 0)
                try await TestWebSocket.with(port: server.port, path: url.path) { socket in
                    try await socket.sendText("free port")
                    #expect(try await socket.receiveText() == "free port")
                }
                return (server.port, server.server)
            }
        }
        // After the body the server is gone: nothing accepts on its port. (Tests run in parallel,
        // so another test's server may have been given the freed port: then it is not this one,
        // which sees no connection.)
        do {
            try await TestWebSocket.with(port: port, path: "/echo") { socket in
                try await socket.sendText("who")
                _ = try await socket.receiveText()
                #expect(stopped.connectionCount == 0, "the stopped server served a connection")
            }
        } catch {
            // Refused: the expected case.
        }
    }

    @Test("the server listens on the IPv6 loopback ::1 too")
    func ipv6Loopback() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(host: "::1")) { server in
                #expect(server.httpURL("/health").absoluteString == "http://[::1]:\(server.port)/health")
                try await TestHTTPResponse.get(host: "::1", port: server.port, "/health") { response in
                    #expect(response.status == 200)
                }
            }
        }
    }

    @Test("each body gets its own server, so tests run in parallel without port clashes")
    func parallelServers() async throws {
        let ports = try await withTimeout {
            try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<4 {
                    group.addTask { try await withDuplexServer { $0.port } }
                }
                return try await group.reduce(into: Set<Int>()) { $0.insert($1) }
            }
        }
        #expect(ports.count == 4)
    }
}
