import Duplex
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import TestSupport
import Testing

/// The Socket.IO preset (Engine.IO 4 over the WebSocket transport), driven by the Duplex client
/// as socket.io-client-swift drives it: the open packet, namespace connects with auth, events,
/// acknowledgements both ways, binary events, the heartbeat; and each fault.
@Suite("Socket.IO preset")
struct SocketIOPresetTests {
    static let path = "/socket.io/?EIO=4&transport=websocket"

    static func script(_ change: (inout SocketIOScript) -> Void = { _ in }) -> SocketIOScript {
        var script = SocketIOScript(
            namespaces: ["/", "/admin"],
            onConnect: [.emit("welcome", #"{"server":"duplex"}"#)],
            onEvent: [
                SocketIORule(
                    event: "subscribe", ack: [#""ok""#],
                    do: [.emit("quote", #"{"n":1}"#), .delay(.milliseconds(5)), .emit("quote", #"{"n":2}"#), .emit("quote", #"{"n":3}"#)]),
                SocketIORule(event: "upload", ack: [#""stored""#]),
                SocketIORule(event: "silent", do: [.emit("done", "true")]),
                SocketIORule(event: "ask", do: [.emit("question", arguments: [#""name?""#], expectAck: true)]),
                SocketIORule(event: "leave", do: [.disconnect]),
                SocketIORule(event: "later", do: [.delay(.milliseconds(200)), .emit("tick", "1")]),
            ],
            authorize: { namespace, auth in namespace == "/admin" && auth?.contains(#""token":"admin""#) != true ? "not authorized" : nil }
        )
        change(&script)
        return script
    }

    static func withRoute(_ script: SocketIOScript = script(), _ body: @escaping @Sendable (RunningDuplexServer) async throws -> Void) async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: [try .socketIO("/socket.io/", script: script)]) { server in try await body(server) }
        }
    }

    /// Connects and reads the open packet.
    static func open(_ server: RunningDuplexServer) async throws -> PresetClient {
        var client = try await PresetClient.connect(server, path)
        let open = try await client.text()
        #expect(open.hasPrefix(#"0{"sid":""#))
        #expect(open.contains(#""pingInterval":"#) && open.contains(#""pingTimeout":"#) && open.contains(#""upgrades":[]"#))
        return client
    }

    @Test("open packet, connect with auth, welcome, an event acknowledged with ok, three quotes, a named namespace refused without its token")
    func events() async throws {
        try await Self.withRoute { server in
            var client = try await Self.open(server)
            try await client.send(#"40{"token":"user"}"#)
            #expect(try await client.text().hasPrefix(#"40{"sid":""#))
            #expect(try await client.text() == #"42["welcome",{"server":"duplex"}]"#)
            try await client.send(#"421["subscribe",{"symbol":"DPLX"}]"#)
            #expect(try await client.texts(4) == [#"431["ok"]"#] + (1...3).map { #"42["quote",{"n":\#($0)}]"# })
            try await client.send(#"40/admin,{"token":"user"}"#)
            #expect(try await client.text() == #"44/admin,{"message":"not authorized"}"#)
            try await client.send(#"40/admin,{"token":"admin"}"#)
            #expect(try await client.text().hasPrefix(#"40/admin,{"sid":""#))
            #expect(try await client.text() == #"42/admin,["welcome",{"server":"duplex"}]"#)
            try await client.send(#"40/nowhere,"#)
            #expect(try await client.text() == #"44/nowhere,{"message":"Invalid namespace"}"#)
            await client.socket.terminate()
            #expect(server.journal.entries.contains { $0.direction == .in && $0.data == #"40{"token":"user"}"# })
        }
    }

    @Test("a binary event from the client is acknowledged once its attachment arrived; the server's emit asks for an ack the client sends")
    func binaryAndAcks() async throws {
        try await Self.withRoute { server in
            var client = try await Self.open(server)
            try await client.send("40")
            _ = try await client.texts(2)
            try await client.send(#"451-7["upload",{"_placeholder":true,"num":0}]"#)
            try await client.send(Data([0xDE, 0xAD]))
            #expect(try await client.text() == #"437["stored"]"#)
            try await client.send(#"42["ask"]"#)
            #expect(try await client.text() == #"421["question","name?"]"#)
            try await client.send(#"431["ada"]"#)
            _ = try await server.journal.first(within: .seconds(10)) { $0.direction == .in && $0.data == #"431["ada"]"# }
            await client.socket.terminate()
        }
    }

    @Test("the server pings every pingInterval and goes on while the client answers")
    func heartbeat() async throws {
        try await Self.withRoute(Self.script { $0.pingInterval = .milliseconds(20) }) { server in
            var client = try await Self.open(server)
            for _ in 0..<3 {
                #expect(try await client.text() == "2")
                try await client.send("3")
            }
            await client.socket.terminate()
        }
    }

    @Test("a client that does not answer a ping, and pongs the route ignores, end the connection after pingTimeout", arguments: [false, true])
    func pingTimeout(ignoresPongs: Bool) async throws {
        let script = Self.script {
            $0.pingInterval = .milliseconds(20)
            // The pong must reach the route before its timeout for "ignored" to mean anything:
            // room for a loaded machine there; none needed when no pong is sent.
            $0.pingTimeout = ignoresPongs ? .seconds(2) : .milliseconds(50)
            $0.ignoresPongs = ignoresPongs
        }
        try await Self.withRoute(script) { server in
            var client = try await Self.open(server)
            #expect(try await client.text() == "2")
            if ignoresPongs {
                try await client.send("3")
                _ = try await server.journal.first(within: .seconds(10)) { $0.data?.contains("pong ignored") == true }
            }
            let end = try await client.end()
            #expect(end.code == 1000)
            #expect(end.reason == "ping timeout")
        }
    }

    @Test("pings stopped: none comes before a message the route sends after ten ping intervals")
    func pingsStopped() async throws {
        try await Self.withRoute(
            Self.script {
                $0.pingInterval = .milliseconds(20); $0.sendsPings = false
            }
        ) { server in
            var client = try await Self.open(server)
            try await client.send("40")
            _ = try await client.texts(2)
            try await client.send(#"42["later"]"#)
            #expect(try await client.text() == #"42["tick",1]"#)
            await client.socket.terminate()
        }
    }

    @Test("faults: connect refused, an ack never sent, a namespace disconnected, a drop after the Nth event, a packet that does not parse")
    func faults() async throws {
        try await Self.withRoute(Self.script { $0.refuseConnect = "maintenance" }) { server in
            var client = try await Self.open(server)
            try await client.send("40")
            #expect(try await client.text() == #"44{"message":"maintenance"}"#)
            await client.socket.terminate()
        }
        try await Self.withRoute { server in
            var client = try await Self.open(server)
            try await client.send("40")
            _ = try await client.texts(2)
            // "silent" has no ack: the first thing after the ask is its emit, no ack before it.
            try await client.send(#"429["silent"]"#)
            #expect(try await client.text() == #"42["done",true]"#)
            try await client.send(#"42["leave"]"#)
            #expect(try await client.text() == "41")
            // Events for a namespace the client left are not answered; the connection stays.
            try await client.send(#"421["subscribe"]"#)
            try await client.send("4x")
            let end = try await client.end()
            #expect(end.messages.isEmpty)
            #expect(end.code == 1000)
            #expect(end.reason == "parse error")
            _ = try await server.journal.first(within: .seconds(10)) { $0.kind == .error && $0.data?.contains("parse error") == true }
        }
        try await Self.withRoute(Self.script { $0.dropAfterEvents = 2 }) { server in
            var client = try await Self.open(server)
            try await client.send("40")
            _ = try await client.texts(2)
            try await client.send(#"42["subscribe"]"#)
            let end = try await client.end()
            #expect(end.messages == [.string(#"42["quote",{"n":1}]"#)])
            #expect(end.code == nil || end.code == 1006)
        }
    }

    @Test("long polling and other Engine.IO versions are refused with 400 and Socket.IO's error body")
    func refusals() async throws {
        try await Self.withRoute { server in
            let polling = try await HTTPProbe.get(port: server.port, "/socket.io/?EIO=4&transport=polling")
            #expect(polling.hasPrefix("HTTP/1.1 400"))
            #expect(polling.hasSuffix(#"{"code":0,"message":"Transport unknown"}"#))
            let upgrade = try await HTTPProbe.send(
                port: server.port,
                "GET /socket.io/?EIO=3&transport=websocket HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    + "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            #expect(upgrade.hasPrefix("HTTP/1.1 400"))
            #expect(upgrade.hasSuffix(#"{"code":5,"message":"Unsupported protocol version"}"#))
        }
    }
    @Test(
        "a message over the handshake's maxPayload (1,000,000 bytes) closes with 1009, journaled; one at the limit is read", arguments: [false, true])
    func maxPayload(binary: Bool) async throws {
        try await Self.withRoute { server in
            var client = try await Self.open(server)
            // At the limit: an Engine.IO noop ("6" and padding) is read, and the connection stays.
            try await client.send("6" + String(repeating: " ", count: 999_999))
            try await client.send("2probe")
            #expect(try await client.text() == "3probe")
            let over = 1_000_001
            if binary { try await client.send(Data(count: over)) } else { try await client.send("6" + String(repeating: " ", count: over - 1)) }
            let end = try await client.end()
            #expect(end.code == 1009)
            #expect(server.journal.entries.contains { $0.kind == .error && $0.data?.contains("over maxPayload (1000000)") == true })
        }
    }
}
