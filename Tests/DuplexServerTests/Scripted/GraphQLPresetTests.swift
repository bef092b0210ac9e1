import Duplex
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

/// The graphql-transport-ws preset, driven by the Duplex client as an app's GraphQL client
/// drives it: init and ack, subscriptions multiplexed by id, `next`, `complete`, `error`, pings
/// both ways; and every close code the spec gives for what breaks it.
@Suite("graphql-transport-ws preset")
struct GraphQLPresetTests {
    static let subprotocol = ["graphql-transport-ws"]

    static func script(_ change: (inout GraphQLScript) -> Void = { _ in }) -> GraphQLScript {
        var script = GraphQLScript(operations: [
            GraphQLOperation(match: .queryContains("ticks"), next: (1...3).map { #"{"data":{"ticks":\#($0)}}"# }, every: .milliseconds(5)),
            GraphQLOperation(match: .queryContains("fail"), then: .error(#"[{"message":"boom"}]"#)),
            GraphQLOperation(match: GraphQLMatch(operationName: "Prices", variables: #"{"symbol":"DPLX"}"#), next: [#"{"data":{"price":7}}"#]),
            GraphQLOperation(match: .queryContains("forever"), next: [#"{"data":{"n":1}}"#], then: .never),
            GraphQLOperation(match: .queryContains("flaky"), next: [#"{"data":{"n":1}}"#, #"{"data":{"n":2}}"#], then: .drop),
        ])
        change(&script)
        return script
    }

    static func withRoute(
        _ script: GraphQLScript = script(),
        _ body: @escaping @Sendable (RunningDuplexServer) async throws -> Void
    ) async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: [try .graphQL("/graphql", script: script)]) { server in try await body(server) }
        }
    }

    /// A client past `connection_init` and its ack.
    static func acknowledged(_ server: RunningDuplexServer) async throws -> PresetClient {
        var client = try await PresetClient.connect(server, "/graphql", protocols: subprotocol)
        try await client.send(#"{"type":"connection_init"}"#)
        #expect(try await client.text() == #"{"type":"connection_ack"}"#)
        return client
    }

    @Test("init and ack, two subscriptions at once by id, next and complete, error with no complete, pings answered, the init payload journaled")
    func subscriptions() async throws {
        try await Self.withRoute { server in
            var client = try await PresetClient.connect(server, "/graphql", protocols: Self.subprotocol)
            #expect(client.socket.negotiatedProtocol == "graphql-transport-ws")
            try await client.send(#"{"type":"connection_init","payload":{"token":"secret"}}"#)
            #expect(try await client.text() == #"{"type":"connection_ack"}"#)
            try await client.send(#"{"id":"a","type":"subscribe","payload":{"query":"subscription { ticks }"}}"#)
            try await client.send(#"{"id":"b","type":"subscribe","payload":{"query":"subscription { fail }"}}"#)
            try await client.send(
                #"{"id":"c","type":"subscribe","payload":{"query":"subscription Prices($symbol: String) { price }","operationName":"Prices","variables":{"symbol":"DPLX"}}}"#
            )
            try await client.send(#"{"type":"ping","payload":{"at":1}}"#)
            var byID: [String: [String]] = [:]
            var pong = false
            while byID["a"]?.last?.contains("complete") != true || byID["b"] == nil || byID["c"]?.last?.contains("complete") != true || !pong {
                let text = try await client.text()
                if text == #"{"type":"pong","payload":{"at":1}}"# {
                    pong = true
                    continue
                }
                let id = try #require(text.firstMatch(of: /"id":"(\w)"/)).1
                byID[String(id), default: []].append(text)
            }
            #expect(
                byID["a"] == (1...3).map { #"{"id":"a","type":"next","payload":{"data":{"ticks":\#($0)}}}"# } + [#"{"id":"a","type":"complete"}"#])
            #expect(byID["b"] == [#"{"id":"b","type":"error","payload":[{"message":"boom"}]}"#])
            #expect(byID["c"] == [#"{"id":"c","type":"next","payload":{"data":{"price":7}}}"#, #"{"id":"c","type":"complete"}"#])
            // An error ends its operation: no complete follows it. The pong came after every
            // message the server wrote for "b", and none of them is a complete.
            #expect(!server.journal.entries.contains { $0.data == #"{"id":"b","type":"complete"}"# })
            #expect(server.journal.entries.contains { $0.direction == .in && $0.data?.contains(#""token":"secret""#) == true })
            await client.socket.terminate()
        }
    }

    @Test("an operation none matches gets an error; the client's complete ends one, so its id can be used again")
    func unmatchedAndComplete() async throws {
        try await Self.withRoute { server in
            var client = try await Self.acknowledged(server)
            try await client.send(#"{"id":"1","type":"subscribe","payload":{"query":"{ unknown }"}}"#)
            #expect(try await client.text().contains(#""type":"error""#))
            try await client.send(#"{"id":"2","type":"subscribe","payload":{"query":"subscription { forever }"}}"#)
            #expect(try await client.text() == #"{"id":"2","type":"next","payload":{"data":{"n":1}}}"#)
            try await client.send(#"{"id":"2","type":"complete"}"#)
            // Had the operation gone on, reusing its id would be closed with 4409.
            try await client.send(#"{"id":"2","type":"subscribe","payload":{"query":"subscription { ticks }"}}"#)
            #expect(try await client.texts(4).last == #"{"id":"2","type":"complete"}"#)
            await client.socket.terminate()
        }
    }

    @Test("a drop after the Nth next: the client sees two next messages, then the connection lost with no close frame")
    func dropAfterNext() async throws {
        try await Self.withRoute { server in
            var client = try await Self.acknowledged(server)
            try await client.send(#"{"id":"1","type":"subscribe","payload":{"query":"subscription { flaky }"}}"#)
            let end = try await client.end()
            #expect(end.messages.count == 2)
            #expect(end.code == nil || end.code == 1006)
            _ = try await server.journal.first(within: .seconds(10)) { $0.kind == .drop && $0.direction == .out }
        }
    }

    @Test("the faults of every scripted route apply to a preset's messages: fragments, then a drop after the second message")
    func faults() async throws {
        try await Self.withRoute(Self.script { $0.faults = WebSocketFaults(fragmentSends: 3, dropAfterSending: 2) }) { server in
            var client = try await Self.acknowledged(server)
            try await client.send(#"{"id":"1","type":"subscribe","payload":{"query":"subscription { ticks }"}}"#)
            let end = try await client.end()
            #expect(end.messages == [.string(#"{"id":"1","type":"next","payload":{"data":{"ticks":1}}}"#)])
            #expect(end.code == nil || end.code == 1006)
        }
    }

    /// What the client does, and the close the preset answers it with.
    struct Breach: Sendable, CustomTestStringConvertible {
        var name: String
        var script: GraphQLScript = GraphQLPresetTests.script()
        var protocols = GraphQLPresetTests.subprotocol
        var sends: [String]
        var code: UInt16
        var reason: String
        var testDescription: String { "\(name): \(code)" }
    }

    static let longID = "x" + String(repeating: "é", count: 100)

    static let breaches: [Breach] = [
        Breach(name: "not JSON", sends: ["{"], code: 4400, reason: "Invalid message received"),
        Breach(name: "a binary message", sends: [], code: 4400, reason: "Binary messages are not allowed"),
        Breach(name: "an unknown type", sends: [#"{"type":"hello"}"#], code: 4400, reason: #"Invalid message received: unknown type "hello""#),
        Breach(
            name: "a subscribe with no query", sends: [#"{"type":"connection_init"}"#, #"{"id":"1","type":"subscribe","payload":{}}"#], code: 4400,
            reason: "Invalid message received"),
        Breach(
            name: "a subscribe before the ack", sends: [#"{"id":"1","type":"subscribe","payload":{"query":"{ a }"}}"#], code: 4401,
            reason: "Unauthorized"),
        Breach(
            name: "an id in use",
            sends: [
                #"{"type":"connection_init"}"#, #"{"id":"1","type":"subscribe","payload":{"query":"forever"}}"#,
                #"{"id":"1","type":"subscribe","payload":{"query":"forever"}}"#,
            ], code: 4409, reason: "Subscriber for 1 already exists"),
        Breach(
            name: "a long id in use: the reason cut to 123 bytes between characters",
            sends: [
                #"{"type":"connection_init"}"#, #"{"id":"\#(longID)","type":"subscribe","payload":{"query":"forever"}}"#,
                #"{"id":"\#(longID)","type":"subscribe","payload":{"query":"forever"}}"#,
            ], code: 4409, reason: "Subscriber for x" + String(repeating: "é", count: 53)),
        Breach(
            name: "a second init", sends: [#"{"type":"connection_init"}"#, #"{"type":"connection_init"}"#], code: 4429,
            reason: "Too many initialisation requests"),
        Breach(
            name: "no init in time", script: script { $0.initTimeout = .milliseconds(50) }, sends: [], code: 4408,
            reason: "Connection initialisation timeout"),
        Breach(
            name: "the ack withheld",
            script: script {
                $0.acknowledge = false; $0.initTimeout = .milliseconds(100)
            }, sends: [#"{"type":"connection_init"}"#],
            code: 4408, reason: "Connection initialisation timeout"),
        Breach(
            name: "init refused", script: script { $0.refuseInit = .forbidden }, sends: [#"{"type":"connection_init"}"#], code: 4403,
            reason: "Forbidden"),
        Breach(
            name: "a token the test refuses",
            script: script { $0.authorize = { payload in payload?.contains(#""token":"good""#) == true ? nil : .unauthorized } },
            sends: [#"{"type":"connection_init","payload":{"token":"bad"}}"#], code: 4401, reason: "Unauthorized"),
        Breach(name: "no subprotocol offered", protocols: [], sends: [], code: 4406, reason: "Subprotocol not acceptable"),
    ]

    @Test("what breaks the protocol gets the spec's close code and reason, journaled", arguments: breaches)
    func breach(_ breach: Breach) async throws {
        try await Self.withRoute(breach.script) { server in
            var client = try await PresetClient.connect(server, "/graphql", protocols: breach.protocols)
            if breach.name == "a binary message" { try await client.send(Data([1, 2])) }
            for text in breach.sends { try await client.send(text) }
            let end = try await client.end()
            #expect(end.code == breach.code)
            #expect(end.reason == breach.reason)
            let code = "\(breach.code)"
            _ = try await server.journal.first(within: .seconds(10)) { $0.kind == .error && $0.data?.contains(code) == true }
        }
    }

    @Test("the route's own pings reach the client; the token the client sent is what authorize saw")
    func serverPingsAndAuthorize() async throws {
        let seen = NIOLockedValueBox<[String]>([])
        let script = Self.script {
            $0.pingEvery = .milliseconds(20)
            $0.authorize = { payload in
                seen.withLockedValue { $0.append(payload ?? "none") }
                return nil
            }
        }
        try await Self.withRoute(script) { server in
            var client = try await PresetClient.connect(server, "/graphql", protocols: Self.subprotocol)
            try await client.send(#"{"type":"connection_init","payload":{"token":"t1"}}"#)
            #expect(try await client.text() == #"{"type":"connection_ack"}"#)
            #expect(try await client.text() == #"{"type":"ping"}"#)
            try await client.send(#"{"type":"pong"}"#)
            #expect(try await client.text() == #"{"type":"ping"}"#)
            #expect(seen.withLockedValue { $0 } == [#"{"token":"t1"}"#])
            await client.socket.terminate()
        }
    }

    @Test("a script whose payload is not JSON is refused with its place")
    func badScript() {
        #expect(throws: ScriptError.self) {
            try ScriptedRoute.graphQL("/g", script: GraphQLScript(operations: [GraphQLOperation(match: .any, next: ["{"])]))
        }
    }
    @Test("a connection runs at most 1,000 operations at once: one more gets an error and the others run on; completing one makes room")
    func operationQuota() async throws {
        try await Self.withRoute { server in
            var client = try await Self.acknowledged(server)
            for id in 0..<1_000 {
                try await client.send(#"{"id":"\#(id)","type":"subscribe","payload":{"query":"subscription { forever }"}}"#)
            }
            _ = try await client.texts(1_000)
            try await client.send(#"{"id":"extra","type":"subscribe","payload":{"query":"subscription { forever }"}}"#)
            let refused = try await client.text()
            #expect(refused.hasPrefix(#"{"id":"extra","type":"error""#) && refused.contains("at most 1000"), "\(refused)")
            #expect(server.journal.entries.contains { $0.kind == .error && $0.data?.contains(#""extra" refused"#) == true })
            try await client.send(#"{"id":"0","type":"complete"}"#)
            try await client.send(#"{"id":"extra","type":"subscribe","payload":{"query":"subscription { forever }"}}"#)
            #expect(try await client.text() == #"{"id":"extra","type":"next","payload":{"data":{"n":1}}}"#)
            await client.socket.terminate()
        }
    }
}
