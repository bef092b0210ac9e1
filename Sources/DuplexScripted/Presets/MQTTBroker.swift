import Foundation
import NIOConcurrencyHelpers

extension ScriptedRoute {
    /// A route that is an MQTT 3.1.1 and 5 broker over WebSocket (subprotocol `mqtt`, binary
    /// messages), as `script` says: CONNECT and CONNACK (with the script's code), SUBSCRIBE and
    /// SUBACK with the wildcards `+` and `#`, UNSUBSCRIBE, PUBLISH both ways at QoS 0 and 1
    /// (PUBACK; QoS 2 is answered and delivered at 1), retained messages, PINGREQ and PINGRESP,
    /// DISCONNECT, and a client's last will delivered to the other subscribers when it drops.
    ///
    /// A PUBLISH reaches every subscriber whose filter matches, the publisher too (3.1.1 has no
    /// "no local"). A WebSocket message may carry part of a packet or several. A protocol
    /// violation (a text message, a malformed or oversized packet, a packet before CONNECT)
    /// closes the connection, after a DISCONNECT with its reason code for MQTT 5, journaled.
    /// Every packet is journaled decoded (``ScriptJournal/Entry/Kind/packet``).
    /// - Throws: ``ScriptError`` when a topic or QoS in `script` is wrong.
    public static func mqtt(_ path: String, script: MQTTScript) throws(ScriptError) -> ScriptedRoute {
        try script.validate()
        let broker = MQTTBroker(script: script)
        return .preset(
            path, name: "mqtt", subprotocols: ["mqtt", "mqttv3.1"], faults: script.faults, onConnect: broker.connected, onMessage: broker.received,
            onEnd: broker.ended)
    }
}

/// An MQTT broker over one route's connections.
final class MQTTBroker: Sendable {
    let script: MQTTScript
    let state = NIOLockedValueBox(State())

    struct State {
        var sessions: [Int: Session] = [:]
        var retained: [String: (payload: Data, qos: Int)] = [:]
        /// The retained payloads' bytes.
        var retainedBytes = 0
    }

    /// The most topic filters one client may hold.
    static let maxSubscriptions = 1_000
    /// The most retained messages the route keeps, and their most bytes: a retained message past
    /// either is delivered and not kept.
    static let maxRetained = 10_000
    static let maxRetainedBytes = 16 * 1024 * 1024

    struct Session {
        let socket: ScriptedWebSocket
        var buffer: MQTTPacketBuffer
        /// 4 (3.1.1) or 5, once CONNECT arrived.
        var version: UInt8?
        var subscriptions: [String: Int] = [:]
        var will: Will?
        var nextID = 0
        /// Packets read so far, for the keep-alive check.
        var packetsRead = 0

        mutating func packetID() -> Int {
            nextID = nextID % 65_535 + 1
            return nextID
        }
    }

    struct Will {
        var topic: String
        var payload: Data
        var qos: Int
        var retain: Bool
    }

    /// A PUBLISH to send: to whom, at which QoS, with which packet id.
    private struct Delivery {
        var socket: ScriptedWebSocket
        var packet: Data
        var description: String
    }

    init(script: MQTTScript) {
        self.script = script
    }

    func connected(_ socket: ScriptedWebSocket) {
        state.withLockedValue {
            $0.sessions[socket.connection] = Session(socket: socket, buffer: MQTTPacketBuffer(maxPacketBytes: script.maxPacketBytes))
        }
    }

    func ended(_ socket: ScriptedWebSocket) {
        let will = state.withLockedValue { $0.sessions.removeValue(forKey: socket.connection)?.will }
        if let will {
            socket.record(.out, .packet, data: "last will on \(will.topic) (the client left without DISCONNECT)")
            publish(topic: will.topic, payload: will.payload, qos: will.qos, retain: will.retain)
        }
    }

    func received(_ message: ScriptedMessage, _ socket: ScriptedWebSocket) throws {
        guard case .binary(let data) = message else {
            return violation(socket, MQTTViolation(reason: "a text message (MQTT over WebSocket is binary)", code: 0x82), closeCode: 1003)
        }
        state.withLockedValue { $0.sessions[socket.connection]?.buffer.append(data) }
        do {
            while let (header, body) = try nextPacket(socket).get() {
                try handle(header: header, body: body, socket)
                if socket.isClosed { return }
            }
        } catch {
            violation(socket, error)
        }
    }

    private func nextPacket(_ socket: ScriptedWebSocket) -> Result<(header: UInt8, body: [UInt8])?, MQTTViolation> {
        state.withLockedValue { state in
            do throws(MQTTViolation) {
                return .success(try state.sessions[socket.connection]?.buffer.next())
            } catch {
                return .failure(error)
            }
        }
    }

    private func version(_ socket: ScriptedWebSocket) -> UInt8? {
        state.withLockedValue { $0.sessions[socket.connection]?.version }
    }

    private func handle(header: UInt8, body: [UInt8], _ socket: ScriptedWebSocket) throws(MQTTViolation) {
        let type = header >> 4
        let flags = header & 0x0F
        state.withLockedValue { $0.sessions[socket.connection]?.packetsRead += 1 }
        var reader = MQTTReader(body)
        guard let version = version(socket) else {
            guard type == 1 else { throw MQTTViolation(reason: "packet type \(type) before CONNECT", code: 0x82) }
            return try connect(&reader, flags: flags, socket)
        }
        switch type {
        case 3: try publish(&reader, flags: flags, version: version, socket)
        case 4, 5, 7:  // PUBACK, PUBREC, PUBCOMP: the client's answers to what the route sent
            let id = try reader.uint16()
            socket.record(.in, .packet, data: "\(["PUBACK", "PUBREC", "", "PUBCOMP"][Int(type) - 4]) id=\(id)")
        case 6:
            guard flags == 2 else { throw MQTTViolation(reason: "PUBREL's flags are 0010") }
            let id = try reader.uint16()
            socket.record(.in, .packet, data: "PUBREL id=\(id)")
            send(MQTTWriter.packet(0x70, MQTTWriter.uint16(id) + (version == 5 ? [0] : [])), "PUBCOMP id=\(id)", socket)
        case 8: try subscribe(&reader, flags: flags, version: version, socket)
        case 10: try unsubscribe(&reader, flags: flags, version: version, socket)
        case 12:
            socket.record(.in, .packet, data: "PINGREQ")
            if script.answerPings {
                send(MQTTWriter.packet(0xD0, []), "PINGRESP", socket)
            } else {
                socket.record(.out, .error, data: "mqtt: PINGRESP withheld (the script's answerPings is false)")
            }
        case 14:
            let reason = version == 5 && !reader.isAtEnd ? try reader.byte() : 0
            socket.record(.in, .packet, data: "DISCONNECT" + (reason == 0 ? "" : " reason=\(reason)"))
            // MQTT 5's 0x04 asks for the will to be sent; otherwise a DISCONNECT discards it.
            if reason != 4 { state.withLockedValue { $0.sessions[socket.connection]?.will = nil } }
            try? socket.close(code: 1000, reason: "")
        case 1: throw MQTTViolation(reason: "a second CONNECT", code: 0x82)
        default: throw MQTTViolation(reason: "packet type \(type), which a client does not send", code: 0x82)
        }
    }

    private func connect(_ reader: inout MQTTReader, flags: UInt8, _ socket: ScriptedWebSocket) throws(MQTTViolation) {
        guard flags == 0 else { throw MQTTViolation(reason: "CONNECT's flags are 0000") }
        let name = try reader.string()
        let level = try reader.byte()
        guard name == "MQTT" || name == "MQIsdp" else { throw MQTTViolation(reason: "protocol name \(name.debugDescription)", code: 0x82) }
        guard level == 4 || level == 5 else {
            socket.record(.in, .packet, data: "CONNECT level=\(level)")
            send(MQTTWriter.packet(0x20, [0, level < 4 ? 1 : 0x84]), "CONNACK unacceptable protocol version", socket)
            try? socket.close(code: 1000, reason: "")
            return
        }
        let connectFlags = try reader.byte()
        guard connectFlags & 1 == 0 else { throw MQTTViolation(reason: "CONNECT's reserved flag is set") }
        let keepAlive = try reader.uint16()
        if level == 5 { try reader.skipProperties() }
        let clientID = try reader.string()
        var will: Will?
        if connectFlags & 0x04 != 0 {
            if level == 5 { try reader.skipProperties() }
            let topic = try reader.string()
            guard MQTTTopic.isValidName(topic) else { throw MQTTViolation(reason: "a will topic that is not a topic name", code: 0x82) }
            let qos = Int(connectFlags >> 3 & 3)
            guard qos < 3 else { throw MQTTViolation(reason: "will QoS 3") }
            will = Will(topic: topic, payload: Data(try reader.binary()), qos: min(qos, 1), retain: connectFlags & 0x20 != 0)
        }
        let username = connectFlags & 0x80 != 0 ? try reader.string() : nil
        let password = connectFlags & 0x40 != 0 ? Data(try reader.binary()) : nil
        socket.record(
            .in, .packet,
            data: "CONNECT v\(level == 5 ? "5" : "3.1.1") client=\(clientID.debugDescription) keepAlive=\(keepAlive)"
                + (username.map { " username=\($0.debugDescription)" } ?? "") + (will.map { " will=\($0.topic)" } ?? ""))
        let code = script.connack != 0 ? script.connack : script.authorize?(clientID, username, password) ?? 0
        send(MQTTWriter.packet(0x20, [0, code] + (level == 5 ? [0] : [])), "CONNACK code=\(code)", socket)
        guard code == 0 else {
            try? socket.close(code: 1000, reason: "")
            return
        }
        state.withLockedValue { state in
            state.sessions[socket.connection]?.version = level
            state.sessions[socket.connection]?.will = will
        }
        if keepAlive > 0 { watchKeepAlive(socket, every: .seconds(keepAlive) * 3 / 2, read: 1) }
    }

    /// Closes a connection that sent nothing for one and a half times its keep-alive, as the
    /// spec says a broker must (MQTT 5: after DISCONNECT 0x8D).
    private func watchKeepAlive(_ socket: ScriptedWebSocket, every limit: Duration, read: Int) {
        socket.after(limit) { [self] in
            let now = state.withLockedValue { $0.sessions[socket.connection]?.packetsRead }
            guard let now else { return }
            guard now == read else { return watchKeepAlive(socket, every: limit, read: now) }
            violation(socket, MQTTViolation(reason: "nothing for 1.5 times the keep-alive", code: 0x8D), closeCode: 1000)
        }
    }

    private func publish(_ reader: inout MQTTReader, flags: UInt8, version: UInt8, _ socket: ScriptedWebSocket) throws(MQTTViolation) {
        let qos = Int(flags >> 1 & 3)
        guard qos < 3 else { throw MQTTViolation(reason: "PUBLISH at QoS 3") }
        let topic = try reader.string()
        guard MQTTTopic.isValidName(topic) else { throw MQTTViolation(reason: "PUBLISH to \(topic.debugDescription), not a topic name", code: 0x82) }
        let id = qos > 0 ? try reader.uint16() : 0
        if version == 5 { try reader.skipProperties() }
        let payload = Data(reader.rest)
        socket.record(
            .in, .packet,
            data: "PUBLISH \(topic) qos=\(qos)" + (qos > 0 ? " id=\(id)" : "") + (flags & 8 != 0 ? " dup" : "") + (flags & 1 != 0 ? " retain" : "")
                + " "
                + MQTTWriter.describe(payload))
        if qos > 0 {
            if script.acknowledgePublishes {
                let name = qos == 1 ? "PUBACK" : "PUBREC"
                send(MQTTWriter.packet(qos == 1 ? 0x40 : 0x50, MQTTWriter.uint16(id) + (version == 5 ? [0] : [])), "\(name) id=\(id)", socket)
            } else {
                // Delivered all the same, as when the acknowledgement is lost on the way: the
                // client resends it with DUP, and its subscribers see it twice.
                socket.record(.out, .error, data: "mqtt: acknowledgement of id=\(id) withheld (the script's acknowledgePublishes is false)")
            }
        }
        publish(topic: topic, payload: payload, qos: min(qos, 1), retain: flags & 1 != 0, from: socket)
    }

    /// Delivers a PUBLISH to every matching subscriber, and keeps it when it is retained.
    func publish(topic: String, payload: Data, qos: Int, retain: Bool, from socket: ScriptedWebSocket? = nil) {
        let (deliveries, kept): ([Delivery], Bool) = state.withLockedValue { state in
            var kept = true
            if retain {
                let replaced = state.retained.removeValue(forKey: topic)
                state.retainedBytes -= replaced?.payload.count ?? 0
                if !payload.isEmpty {
                    kept = state.retained.count < Self.maxRetained && state.retainedBytes + payload.count <= Self.maxRetainedBytes
                    if kept {
                        state.retained[topic] = (payload, qos)
                        state.retainedBytes += payload.count
                    }
                }
            }
            var deliveries: [Delivery] = []
            for key in state.sessions.keys.sorted() {
                guard var session = state.sessions[key], let version = session.version else { continue }
                let granted = session.subscriptions.filter { MQTTTopic.matches(topic, filter: $0.key) }.map(\.value).max()
                guard let granted else { continue }
                let level = min(granted, qos)
                let id = level > 0 ? session.packetID() : 0
                state.sessions[key] = session
                deliveries.append(
                    Delivery(
                        socket: session.socket,
                        packet: MQTTWriter.publish(topic: topic, payload: payload, qos: level, retain: false, id: id, version: version),
                        description: "PUBLISH \(topic) qos=\(level)" + (level > 0 ? " id=\(id)" : "") + " " + MQTTWriter.describe(payload)))
            }
            return (deliveries, kept)
        }
        if !kept {
            socket?.record(
                .in, .error,
                data:
                    "mqtt: retained store full (\(Self.maxRetained) messages or \(Self.maxRetainedBytes) bytes): the retained message of \(String(topic.prefix(100)).debugDescription) delivered, not kept"
            )
        }
        for delivery in deliveries { send(delivery.packet, delivery.description, delivery.socket) }
    }

    func send(_ packet: Data, _ description: String, _ socket: ScriptedWebSocket) {
        guard (try? socket.send(binary: packet)) != nil else { return }
        socket.record(.out, .packet, data: description)
    }

    private func violation(_ socket: ScriptedWebSocket, _ violation: MQTTViolation, closeCode: UInt16 = 1002) {
        let what = violation.code == 0x8D ? "keep-alive expired" : "protocol violation"
        socket.record(.in, .error, data: "mqtt: \(what): \(violation.reason); closing")
        if version(socket) == 5 {
            send(MQTTWriter.packet(0xE0, [violation.code, 0]), "DISCONNECT reason=\(violation.code)", socket)
        }
        try? socket.close(code: closeCode, reason: ScriptedWebSocket.closeReason("MQTT: \(violation.reason)"))
    }
}
