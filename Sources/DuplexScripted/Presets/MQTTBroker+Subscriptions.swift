import Foundation
import NIOConcurrencyHelpers

/// Subscriptions, and what a route's script does when a client subscribes.
extension MQTTBroker {
    func subscribe(_ reader: inout MQTTReader, flags: UInt8, version: UInt8, _ socket: ScriptedWebSocket) throws(MQTTViolation) {
        guard flags == 2 else { throw MQTTViolation(reason: "SUBSCRIBE's flags are 0010") }
        let id = try reader.uint16()
        if version == 5 { try reader.skipProperties() }
        var requests: [(filter: String, qos: Int)] = []
        while !reader.isAtEnd {
            let filter = try reader.string()
            let options = try reader.byte()
            guard options & (version == 5 ? 0xC0 : 0xFC) == 0, options & 3 < 3 else { throw MQTTViolation(reason: "SUBSCRIBE options \(options)") }
            requests.append((filter, Int(options & 3)))
        }
        guard !requests.isEmpty else { throw MQTTViolation(reason: "a SUBSCRIBE with no topic filter", code: 0x82) }
        socket.record(.in, .packet, data: "SUBSCRIBE id=\(id) " + requests.map { "\($0.filter) qos=\($0.qos)" }.joined(separator: ", "))
        let (codes, accepted, retained, overQuota) = state.withLockedValue { state in
            // A client holds at most maxSubscriptions filters: one past them is refused (MQTT 5's
            // 0x97, quota exceeded; 3.1.1's 0x80), so that no client makes the broker grow
            // without bound.
            var subscriptions = state.sessions[socket.connection]?.subscriptions ?? [:]
            var overQuota = 0
            let codes: [UInt8] = requests.map { request in
                guard MQTTTopic.isValidFilter(request.filter) else { return version == 5 ? 0x8F : 0x80 }
                guard subscriptions[request.filter] != nil || subscriptions.count < Self.maxSubscriptions else {
                    overQuota += 1
                    return version == 5 ? 0x97 : 0x80
                }
                subscriptions[request.filter] = min(request.qos, 1)
                return UInt8(min(request.qos, 1))
            }
            let accepted = zip(requests, codes).filter { $0.1 < 0x80 }.map { ($0.0.filter, Int($0.1)) }
            state.sessions[socket.connection]?.subscriptions = subscriptions
            // Each at the lower of its own QoS and the highest this SUBSCRIBE granted for it.
            let retained: [(String, Data, Int)] = state.retained.sorted { $0.key < $1.key }.compactMap { topic, message in
                let granted = accepted.filter { MQTTTopic.matches(topic, filter: $0.0) }.map(\.1).max()
                return granted.map { (topic, message.payload, min($0, message.qos)) }
            }
            return (codes, accepted, retained, overQuota)
        }
        if overQuota > 0 {
            socket.record(
                .out, .error, data: "mqtt: a client holds at most \(Self.maxSubscriptions) topic filters: \(overQuota) refused (quota exceeded)")
        }
        send(MQTTWriter.packet(0x90, MQTTWriter.uint16(id) + (version == 5 ? [0] : []) + codes), "SUBACK id=\(id) codes=\(codes)", socket)
        for (topic, payload, qos) in retained {
            send(topic: topic, payload: payload, qos: qos, retain: true, to: socket)
        }
        for (filter, _) in accepted {
            guard let rule = script.onSubscribe.first(where: { $0.topic == filter }) else { continue }
            run(rule.actions[...], topic: filter, socket)
        }
    }

    func unsubscribe(_ reader: inout MQTTReader, flags: UInt8, version: UInt8, _ socket: ScriptedWebSocket) throws(MQTTViolation) {
        guard flags == 2 else { throw MQTTViolation(reason: "UNSUBSCRIBE's flags are 0010") }
        let id = try reader.uint16()
        if version == 5 { try reader.skipProperties() }
        var filters: [String] = []
        while !reader.isAtEnd { filters.append(try reader.string()) }
        guard !filters.isEmpty else { throw MQTTViolation(reason: "an UNSUBSCRIBE with no topic filter", code: 0x82) }
        socket.record(.in, .packet, data: "UNSUBSCRIBE id=\(id) " + filters.joined(separator: ", "))
        state.withLockedValue { state in
            for filter in filters { state.sessions[socket.connection]?.subscriptions[filter] = nil }
        }
        let body = MQTTWriter.uint16(id) + (version == 5 ? [0] + [UInt8](repeating: 0, count: filters.count) : [])
        send(MQTTWriter.packet(0xB0, body), "UNSUBACK id=\(id)", socket)
    }

    /// Sends one client a PUBLISH (a retained message, or the script's).
    private func send(topic: String, payload: Data, qos: Int, retain: Bool, to socket: ScriptedWebSocket) {
        let prepared: (Int, UInt8)? = state.withLockedValue { state in
            guard let version = state.sessions[socket.connection]?.version else { return nil }
            return (qos > 0 ? state.sessions[socket.connection]?.packetID() ?? 1 : 0, version)
        }
        guard let (id, version) = prepared else { return }
        send(
            MQTTWriter.publish(topic: topic, payload: payload, qos: qos, retain: retain, id: id, version: version),
            "PUBLISH \(topic) qos=\(qos)" + (qos > 0 ? " id=\(id)" : "") + (retain ? " retain" : "") + " " + MQTTWriter.describe(payload), socket)
    }

    /// Runs a rule's actions for one client, in order, waiting where one says to.
    private func run(_ actions: ArraySlice<MQTTAction>, topic: String, _ socket: ScriptedWebSocket) {
        var rest = actions
        while let action = rest.popFirst() {
            guard !socket.isClosed else { return }
            switch action {
            case .publish(let topic, let payload, let qos, let retain):
                send(topic: topic, payload: payload, qos: qos, retain: retain, to: socket)
            case .delay(let duration):
                let remaining = rest
                socket.after(duration) { [self] in run(remaining, topic: topic, socket) }
                return
            case .dropMidPacket:
                let name = MQTTTopic.isValidName(topic) ? topic : "duplex"
                let packet = MQTTWriter.publish(topic: name, payload: Data("cut short".utf8), qos: 0, retain: false, id: 0, version: 4)
                socket.record(.out, .packet, data: "PUBLISH \(name), its first \(packet.count / 2) of \(packet.count) bytes, then a drop")
                try? socket.send(binary: packet.prefix(packet.count / 2))
                try? socket.drop()
                return
            case .disconnect:
                let version = state.withLockedValue { $0.sessions[socket.connection]?.version }
                if version == 5 { send(MQTTWriter.packet(0xE0, [0]), "DISCONNECT reason=0", socket) }
                try? socket.close(code: 1000, reason: "")
                return
            case .drop:
                try? socket.drop()
                return
            }
        }
    }
}
