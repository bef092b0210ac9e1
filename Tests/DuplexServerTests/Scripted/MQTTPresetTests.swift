import Duplex
import DuplexServer
import DuplexTesting
import Foundation
import Testing

/// The MQTT preset, driven by the Duplex client as CocoaMQTT or mqtt-nio drive a broker over
/// WebSocket: binary messages carrying MQTT 3.1.1 and 5 packets, split and joined as a client
/// may; subscriptions with wildcards, QoS 0 and 1, retained messages, the last will; each fault
/// and each protocol violation.
@Suite("MQTT preset")
struct MQTTPresetTests {
    static func script(_ change: (inout MQTTScript) -> Void = { _ in }) -> MQTTScript {
        var script = MQTTScript(onSubscribe: [
            MQTTRule(
                topic: "ticks", do: [.publish("ticks", "tick 1"), .delay(.milliseconds(5)), .publish("ticks", "tick 2"), .publish("ticks", "tick 3")]),
            MQTTRule(topic: "cut", do: [.dropMidPacket]),
        ])
        change(&script)
        return script
    }

    static func withRoute(_ script: MQTTScript = script(), _ body: @escaping @Sendable (RunningDuplexServer) async throws -> Void) async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(routes: [try .mqtt("/mqtt", script: script)]) { server in try await body(server) }
        }
    }

    // MARK: Packets, as a client writes them

    static func packet(_ header: UInt8, _ body: [UInt8]) -> [UInt8] {
        var out: [UInt8] = [header]
        var length = body.count
        repeat {
            var byte = UInt8(length & 0x7F)
            length >>= 7
            if length > 0 { byte |= 0x80 }
            out.append(byte)
        } while length > 0
        return out + body
    }

    static func string(_ text: String) -> [UInt8] { [UInt8(text.utf8.count >> 8), UInt8(text.utf8.count & 0xFF)] + Array(text.utf8) }

    static func connect(_ client: String, version: UInt8 = 4, will: (topic: String, payload: String)? = nil, keepAlive: UInt16 = 60) -> [UInt8] {
        var flags: UInt8 = 0x02
        var body = string("MQTT") + [version]
        if will != nil { flags |= 0x04 }
        body += [flags, UInt8(keepAlive >> 8), UInt8(keepAlive & 0xFF)] + (version == 5 ? [0] : []) + string(client)
        if let will { body += (version == 5 ? [0] : []) + string(will.topic) + string(will.payload) }
        return packet(0x10, body)
    }

    static func subscribe(_ filters: [String], id: UInt16 = 1, qos: UInt8 = 1, version: UInt8 = 4) -> [UInt8] {
        packet(0x82, [UInt8(id >> 8), UInt8(id & 0xFF)] + (version == 5 ? [0] : []) + filters.flatMap { string($0) + [qos] })
    }

    static func publish(_ topic: String, _ text: String, qos: UInt8 = 0, id: UInt16 = 1, retain: Bool = false, version: UInt8 = 4) -> [UInt8] {
        packet(
            0x30 | qos << 1 | (retain ? 1 : 0),
            string(topic) + (qos > 0 ? [UInt8(id >> 8), UInt8(id & 0xFF)] : []) + (version == 5 ? [0] : []) + Array(text.utf8))
    }

    static let pingRequest: [UInt8] = [0xC0, 0]
    static let disconnect: [UInt8] = [0xE0, 0]

    /// A PUBLISH the broker sent: its topic, payload, QoS and retain flag.
    static func published(_ data: Data, version: UInt8 = 4) throws -> (topic: String, payload: String, qos: Int, retain: Bool) {
        let bytes = [UInt8](data)
        try #require(bytes.first.map { $0 >> 4 } == 3, "not a PUBLISH: \(bytes)")
        let qos = Int(bytes[0] >> 1 & 3)
        var index = 1
        while bytes[index] & 0x80 != 0 { index += 1 }
        index += 1
        let length = Int(bytes[index]) << 8 | Int(bytes[index + 1])
        let topic = String(decoding: bytes[(index + 2)..<(index + 2 + length)], as: UTF8.self)
        index += 2 + length + (qos > 0 ? 2 : 0) + (version == 5 ? 1 : 0)
        return (topic, String(decoding: bytes[index...], as: UTF8.self), qos, bytes[0] & 1 == 1)
    }

    static func connected(_ server: RunningDuplexServer, _ name: String, version: UInt8 = 4, will: (String, String)? = nil) async throws
        -> PresetClient
    {
        var client = try await PresetClient.connect(server, "/mqtt", protocols: ["mqtt"])
        #expect(client.socket.negotiatedProtocol == "mqtt")
        try await client.send(Data(connect(name, version: version, will: will)))
        #expect(try await client.binary() == Data(version == 5 ? [0x20, 3, 0, 0, 0] : [0x20, 2, 0, 0]))
        return client
    }

    // MARK: Tests

    @Test(
        "CONNACK, SUBACK, the script's three ticks, a PUBLISH at QoS 1 acknowledged and echoed to its publisher, PINGRESP, DISCONNECT",
        arguments: [4, 5] as [UInt8])
    func session(version: UInt8) async throws {
        try await Self.withRoute { server in
            var client = try await Self.connected(server, "app", version: version)
            try await client.send(Data(Self.subscribe(["ticks", "echo"], id: 7, version: version)))
            #expect(try await client.binary() == Data(Self.packet(0x90, [0, 7] + (version == 5 ? [0] : []) + [1, 1])))
            for n in 1...3 {
                let tick = try Self.published(try await client.binary(), version: version)
                #expect(tick.topic == "ticks" && tick.payload == "tick \(n)" && tick.qos == 0)
            }
            try await client.send(Data(Self.publish("echo", "hello", qos: 1, id: 9, version: version)))
            #expect(try await client.binary() == Data(Self.packet(0x40, [0, 9] + (version == 5 ? [0] : []))))
            let echo = try Self.published(try await client.binary(), version: version)
            #expect(echo.topic == "echo" && echo.payload == "hello" && echo.qos == 1)
            try await client.send(Data(Self.pingRequest))
            #expect(try await client.binary() == Data([0xD0, 0]))
            try await client.send(Data(Self.disconnect))
            let end = try await client.end()
            #expect(end.code == 1000)
            #expect(server.journal.entries.contains { $0.kind == .packet && $0.data == "PINGREQ" })
        }
    }

    @Test("a packet split across WebSocket messages and two packets in one message are read as packets")
    func framing() async throws {
        try await Self.withRoute { server in
            var client = try await PresetClient.connect(server, "/mqtt", protocols: ["mqtt"])
            let connect = Self.connect("split")
            try await client.send(Data(connect.prefix(5)))
            try await client.send(Data(connect.dropFirst(5)))
            #expect(try await client.binary() == Data([0x20, 2, 0, 0]))
            try await client.send(Data(Self.pingRequest + Self.pingRequest))
            #expect(try await client.binary() == Data([0xD0, 0]))
            #expect(try await client.binary() == Data([0xD0, 0]))
            await client.socket.terminate()
        }
    }

    @Test(
        "wildcards: + matches one level, # the rest and its parent, $ topics no first-level wildcard; a retained message reaches a later subscriber at its granted QoS"
    )
    func wildcardsAndRetained() async throws {
        try await Self.withRoute { server in
            var publisher = try await Self.connected(server, "publisher")
            try await publisher.send(Data(Self.publish("config/mode", "dark", qos: 1, retain: true)))
            // Its PUBACK says the broker has it: a later subscriber gets it.
            #expect(try await publisher.binary() == Data(Self.packet(0x40, [0, 1])))
            var subscriber = try await Self.connected(server, "subscriber")
            try await subscriber.send(Data(Self.subscribe(["sport/+/score", "news/#", "#"], qos: 0)))
            _ = try await subscriber.binary()
            let retained = try Self.published(try await subscriber.binary())
            // Published at QoS 1, delivered at the 0 this subscription was granted.
            #expect(retained.topic == "config/mode" && retained.payload == "dark" && retained.retain && retained.qos == 0)
            for topic in ["$SYS/load", "sport/tennis/score", "news", "news/world/eu"] {
                try await publisher.send(Data(Self.publish(topic, topic)))
            }
            // "$SYS/load" matches no subscription ("#" does not take it); the others arrive in order.
            var topics: [String] = []
            for _ in 0..<3 { topics.append(try Self.published(try await subscriber.binary()).topic) }
            #expect(topics == ["sport/tennis/score", "news", "news/world/eu"])
            await publisher.socket.terminate()
            await subscriber.socket.terminate()
        }
    }

    @Test("a client that drops without DISCONNECT has its last will delivered to the others; one that disconnects does not")
    func lastWill() async throws {
        try await Self.withRoute { server in
            var watcher = try await Self.connected(server, "watcher")
            try await watcher.send(Data(Self.subscribe(["status/+"], qos: 0)))
            _ = try await watcher.binary()
            let polite = try await Self.connected(server, "polite", will: ("status/polite", "gone"))
            try await polite.send(Data(Self.disconnect))
            _ = try await server.journal.first(within: .seconds(10)) { $0.kind == .close && $0.direction == .out }
            let rude = try await Self.connected(server, "rude", will: ("status/rude", "offline"))
            await rude.socket.terminate()
            let will = try Self.published(try await watcher.binary())
            #expect(will.topic == "status/rude" && will.payload == "offline")
            await watcher.socket.terminate()
        }
    }

    @Test("faults: CONNACK refused, PINGRESP withheld, PUBACK never sent, a drop mid-packet")
    func faults() async throws {
        try await Self.withRoute(Self.script { $0.connack = 5 }) { server in
            var client = try await PresetClient.connect(server, "/mqtt", protocols: ["mqtt"])
            try await client.send(Data(Self.connect("refused")))
            let end = try await client.end()
            #expect(end.messages == [.data(Data([0x20, 2, 0, 5]))])
        }
        try await Self.withRoute(
            Self.script {
                $0.answerPings = false; $0.acknowledgePublishes = false
            }
        ) { server in
            var client = try await Self.connected(server, "quiet")
            try await client.send(Data(Self.subscribe(["echo"], qos: 1)))
            _ = try await client.binary()
            // Neither the PINGREQ nor the PUBLISH is answered: the PUBLISH is delivered (to its
            // publisher, a subscriber), then the next packet is the SUBACK of a later SUBSCRIBE.
            try await client.send(Data(Self.pingRequest))
            try await client.send(Data(Self.publish("echo", "unacknowledged", qos: 1, id: 3)))
            try await client.send(Data(Self.subscribe(["other"], id: 4)))
            #expect(try Self.published(try await client.binary()).payload == "unacknowledged")
            #expect(try await client.binary() == Data(Self.packet(0x90, [0, 4, 1])))
            #expect(server.journal.entries.contains { $0.kind == .error && $0.data?.contains("PINGRESP withheld") == true })
            #expect(server.journal.entries.contains { $0.kind == .error && $0.data?.contains("acknowledgement of id=3 withheld") == true })
            await client.socket.terminate()
        }
        try await Self.withRoute { server in
            var client = try await Self.connected(server, "cut")
            try await client.send(Data(Self.subscribe(["cut"], qos: 0)))
            _ = try await client.binary()
            let end = try await client.end()
            let half = try #require(end.messages.first)
            guard case .data(let bytes) = half else { throw PresetClientError("not binary") }
            #expect(bytes.first == 0x30 && bytes.count < Int(bytes[1]) + 2)
            #expect(end.code == nil || end.code == 1006)
        }
    }

    @Test("a client silent for one and a half times its keep-alive is closed, after MQTT 5's DISCONNECT 0x8D; one that pings is not")
    func keepAlive() async throws {
        try await Self.withRoute { server in
            var silent = try await PresetClient.connect(server, "/mqtt", protocols: ["mqtt"])
            try await silent.send(Data(Self.connect("silent", version: 5, keepAlive: 1)))
            var pinging = try await Self.connected(server, "pinging", version: 5)
            let end = try await silent.end()
            #expect(end.messages == [.data(Data([0x20, 3, 0, 0, 0])), .data(Data([0xE0, 2, 0x8D, 0]))])
            #expect(end.code == 1000)
            // The other connection (keep-alive 60) is still served.
            try await pinging.send(Data(Self.pingRequest))
            #expect(try await pinging.binary() == Data([0xD0, 0]))
            _ = try await server.journal.first(within: .seconds(10)) { $0.data?.contains("keep-alive expired") == true }
            await pinging.socket.terminate()
        }
    }

    /// A breach of the protocol and the close it gets.
    struct Breach: Sendable, CustomTestStringConvertible {
        var name: String
        var sends: [[UInt8]]
        var text = false
        var code: UInt16
        var answers: [[UInt8]] = []
        var testDescription: String { name }
    }

    static let breaches: [Breach] = [
        Breach(name: "a text message", sends: [], text: true, code: 1003),
        Breach(name: "a packet before CONNECT", sends: [MQTTPresetTests.pingRequest], code: 1002),
        Breach(
            name: "a second CONNECT", sends: [MQTTPresetTests.connect("a"), MQTTPresetTests.connect("a")], code: 1002, answers: [[0x20, 2, 0, 0]]),
        Breach(name: "a remaining length of 5 bytes", sends: [[0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]], code: 1002),
        Breach(
            name: "a PUBLISH to a wildcard (MQTT 5: DISCONNECT 0x82 first)",
            sends: [MQTTPresetTests.connect("w", version: 5), MQTTPresetTests.publish("a/+", "x", version: 5)], code: 1002,
            answers: [[0x20, 3, 0, 0, 0], [0xE0, 2, 0x82, 0]]),
        Breach(
            name: "a packet over maxPacketBytes (MQTT 5: DISCONNECT 0x95 first)",
            sends: [MQTTPresetTests.connect("big", version: 5), MQTTPresetTests.publish("big", String(repeating: "x", count: 300), version: 5)],
            code: 1002, answers: [[0x20, 3, 0, 0, 0], [0xE0, 2, 0x95, 0]]),
        Breach(
            name: "a SUBSCRIBE with no filter", sends: [MQTTPresetTests.connect("s"), MQTTPresetTests.packet(0x82, [0, 1])], code: 1002,
            answers: [[0x20, 2, 0, 0]]),
    ]

    @Test("a protocol violation closes the connection, after MQTT 5's DISCONNECT with its reason, journaled", arguments: breaches)
    func breach(_ breach: Breach) async throws {
        try await Self.withRoute(Self.script { $0.maxPacketBytes = 256 }) { server in
            var client = try await PresetClient.connect(server, "/mqtt", protocols: ["mqtt"])
            if breach.text { try await client.send("CONNECT") }
            for packet in breach.sends { try await client.send(Data(packet)) }
            let end = try await client.end()
            #expect(end.code == breach.code)
            #expect(end.messages == breach.answers.map { .data(Data($0)) })
            _ = try await server.journal.first(within: .seconds(10)) { $0.kind == .error && $0.data?.contains("protocol violation") == true }
        }
    }
    @Test(
        "a client holds at most 1,000 topic filters: one more is refused with 0x97 (MQTT 5; 0x80 in 3.1.1), journaled", arguments: [4, 5] as [UInt8])
    func subscriptionQuota(version: UInt8) async throws {
        try await Self.withRoute { server in
            var client = try await Self.connected(server, "greedy", version: version)
            try await client.send(Data(Self.subscribe((0...1_000).map { "t/\($0)" }, qos: 0, version: version)))
            let codes = try await client.binary().suffix(1_001)
            #expect(codes.prefix(1_000).allSatisfy { $0 == 0 })
            #expect(codes.last == (version == 5 ? 0x97 : 0x80))
            #expect(server.journal.entries.contains { $0.kind == .error && $0.data?.contains("at most 1000 topic filters: 1 refused") == true })
            // A filter it holds already is no new one: subscribing to it again is granted.
            try await client.send(Data(Self.subscribe(["t/0"], id: 2, qos: 1, version: version)))
            #expect(try await client.binary().last == 1)
            await client.socket.terminate()
        }
    }

    @Test("the route keeps at most 10,000 retained messages: one more is delivered and not kept, journaled")
    func retainedQuota() async throws {
        try await Self.withRoute { server in
            var publisher = try await Self.connected(server, "publisher")
            // 10,001 retained messages in one WebSocket message, then a PINGREQ to know they were read.
            try await publisher.send(Data((0...10_000).flatMap { Self.publish("r/\($0)", "v", retain: true) } + Self.pingRequest))
            #expect(try await publisher.binary() == Data([0xD0, 0]))
            #expect(server.journal.entries.contains { $0.kind == .error && $0.data?.contains("retained store full") == true })
            var subscriber = try await Self.connected(server, "subscriber")
            try await subscriber.send(Data(Self.subscribe(["r/0", "r/10000"], qos: 0) + Self.pingRequest))
            _ = try await subscriber.binary()  // SUBACK
            #expect(try Self.published(try await subscriber.binary()).topic == "r/0")
            // r/10000 was not kept: the PINGRESP comes next.
            #expect(try await subscriber.binary() == Data([0xD0, 0]))
            await publisher.socket.terminate()
            await subscriber.socket.terminate()
        }
    }
}
