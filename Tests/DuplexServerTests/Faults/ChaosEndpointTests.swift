import DuplexSchema
import DuplexTesting
import NIOCore
import NIOHTTP1
import Testing

@testable import DuplexServer

@Suite("/_chaos/ endpoints")
struct ChaosEndpointTests {
    func post(_ port: Int, _ path: String) async throws -> (status: Int, body: String) {
        try await TestHTTPResponse.get(port: port, path, method: .POST) { response in
            (response.status, try await response.readBody())
        }
    }

    @Test("without --chaos the endpoints do not exist")
    func off() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let (status, _) = try await post(server.port, "/_chaos/drop")
                #expect(status == 404)
            }
        }
    }

    @Test("drop over HTTP reaches the scoped connections; bad parameters get 400")
    func dropAndBadInput() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(chaos: true)) { server in
                try await TestWebSocket.with(port: server.port, path: "/echo") { echo in
                    try await echo.sendText("warm")
                    _ = try await echo.receiveText()
                    let (status, body) = try await post(server.port, "/_chaos/drop?route=echo")
                    #expect(status == 200 && body == #"{"affected":1}"#)
                    try await echo.waitForEndOfStream()
                }
                let tooLong = "/_chaos/close?code=4000&reason=" + String(repeating: "x", count: 124)
                for bad in [
                    "/_chaos/close", "/_chaos/close?code=1005", "/_chaos/stall?ms=0", "/_chaos/refuse?ms=abc", "/_chaos/drop?route=nope", tooLong,
                ] {
                    let (status, body) = try await post(server.port, bad)
                    #expect(status == 400, "\(bad)")
                    #expect(body.contains("error"), "\(bad)")
                }
                let (status, body) = try await post(server.port, "/_chaos/close?code=4000&reason=bye&room=none")
                #expect(status == 200 && body == #"{"affected":0}"#)
                // The library call cuts a long reason at a character boundary instead: the frame stays legal.
                try await TestWebSocket.with(port: server.port, path: "/echo") { echo in
                    try await echo.sendText("warm")
                    _ = try await echo.receiveText()
                    server.server.closeConnections(.route("echo"), code: .init(4000), reason: String(repeating: "é", count: 100))
                    let close = try await echo.receiveClose()
                    #expect(close.code == 4000)
                    #expect(close.reason == String(repeating: "é", count: 61), "123 bytes hold 61 two-byte characters")
                }
            }
        }
    }

    /// That the old connection hears nothing, not even a pong, is FaultProxyTests' `serverPathSwitch`.
    @Test("path-switch over HTTP reaches the open connections in scope, while a new one is served; a bad scope gets 400")
    func pathSwitch() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(chaos: true)) { server in
                try await TestWebSocket.with(port: server.port, path: "/echo") { old in
                    try await old.sendText("warm")
                    _ = try await old.receiveText()
                    let (status, body) = try await post(server.port, "/_chaos/path-switch?route=echo")
                    #expect(status == 200 && body == #"{"affected":1}"#)
                    try await old.sendText("into the void")
                    try await TestWebSocket.with(port: server.port, path: "/echo") { fresh in
                        try await fresh.sendText("served")
                        #expect(try await fresh.receiveText() == "served")
                    }
                }
                let (status, _) = try await post(server.port, "/_chaos/path-switch?route=nope")
                #expect(status == 400)
            }
        }
    }

    @Test("refuse answers new connections and upgrades with 503, leaves open ones alone, and lets /_chaos/ through")
    func refuse() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(chaos: true)) { server in
                try await TestWebSocket.with(port: server.port, path: "/echo") { open in
                    try await open.sendText("before")
                    _ = try await open.receiveText()
                    let (status, _) = try await post(server.port, "/_chaos/refuse?ms=60000")
                    #expect(status == 200)
                    let health = try await TestHTTPResponse.get(port: server.port, "/health") { $0.status }
                    #expect(health == 503)
                    try await TestWebSocket.with(port: server.port, path: "/echo") { refused in
                        #expect(refused.status == 503)
                    }
                    let (stillThere, _) = try await post(server.port, "/_chaos/drop?room=none")
                    #expect(stillThere == 200)
                    try await open.sendText("after")
                    #expect(try await open.receiveText() == "after")
                }
            }
        }
    }
}
