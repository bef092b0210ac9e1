public import Foundation

/// What an MQTT route (``ScriptedRoute/mqtt(_:script:)``) does besides being a broker: its
/// CONNACK, what it publishes when a client subscribes, and which answers it withholds.
///
/// ```swift
/// let broker = try ScriptedRoute.mqtt("/mqtt", script: MQTTScript(onSubscribe: [
///     MQTTRule(topic: "ticks", do: [.publish("ticks", "tick 1"), .delay(.milliseconds(50)), .publish("ticks", "tick 2")]),
/// ]))
/// ```
public struct MQTTScript: Sendable {
    /// The CONNACK's return code (3.1.1) or reason code (5): 0 accepts; another refuses, and the
    /// connection closes after the CONNACK (3.1.1: 1 to 5, such as 5 "not authorized"; 5: 0x80
    /// and above, such as 0x87 "Not authorized").
    public var connack: UInt8
    /// Decides each CONNECT from its client identifier, user name and password: nil uses
    /// ``connack``, a code refuses. Checked after a refusing ``connack``.
    public var authorize: (@Sendable (_ clientID: String, _ username: String?, _ password: Data?) -> UInt8?)?
    /// Whether PINGREQ gets PINGRESP; false withholds it.
    public var answerPings: Bool
    /// Whether a QoS 1 PUBLISH gets PUBACK (and a QoS 2 one PUBREC); false never sends it (the
    /// message is delivered all the same, as when the acknowledgement is lost), so the client
    /// must resend it with DUP.
    public var acknowledgePublishes: Bool
    /// What the route publishes to a client when it subscribes: the first rule whose topic
    /// equals a filter the client subscribed to.
    public var onSubscribe: [MQTTRule]
    /// The largest packet a client may send, in bytes (its fixed header included); larger is a
    /// protocol violation.
    public var maxPacketBytes: Int
    /// Faults on every message the route sends (a delay, reordering, duplicates, fragments, a
    /// drop after the Nth), as on any scripted WebSocket route.
    public var faults: WebSocketFaults

    /// A script: every client accepted and answered, 1 MiB packets at most.
    public init(
        connack: UInt8 = 0,
        authorize: (@Sendable (_ clientID: String, _ username: String?, _ password: Data?) -> UInt8?)? = nil,
        answerPings: Bool = true,
        acknowledgePublishes: Bool = true,
        onSubscribe: [MQTTRule] = [],
        maxPacketBytes: Int = 1 << 20,
        faults: WebSocketFaults = .init()
    ) {
        self.connack = connack
        self.authorize = authorize
        self.answerPings = answerPings
        self.acknowledgePublishes = acknowledgePublishes
        self.onSubscribe = onSubscribe
        self.maxPacketBytes = maxPacketBytes
        self.faults = faults
    }

    /// Checks the topics and QoS of every action.
    /// - Throws: ``ScriptError`` naming the place.
    public func validate() throws(ScriptError) {
        guard (16...(256 << 20)).contains(maxPacketBytes) else {
            throw ScriptError(path: "maxPacketBytes", "must be from 16 to \(256 << 20) (got \(maxPacketBytes))")
        }
        for (index, rule) in onSubscribe.enumerated() {
            guard MQTTTopic.isValidFilter(rule.topic) else { throw ScriptError(path: "onSubscribe[\(index)].topic", "not a topic filter") }
            for (item, action) in rule.actions.enumerated() {
                guard case .publish(let topic, _, let qos, _) = action else { continue }
                guard MQTTTopic.isValidName(topic) else {
                    throw ScriptError(path: "onSubscribe[\(index)].do[\(item)].topic", "a topic name is not empty and has no + or #")
                }
                guard (0...1).contains(qos) else { throw ScriptError(path: "onSubscribe[\(index)].do[\(item)].qos", "is 0 or 1") }
            }
        }
    }
}

/// What an MQTT route does when a client subscribes to ``topic``.
public struct MQTTRule: Sendable, Equatable {
    /// The topic filter, as the client subscribes to it (compared as written).
    public var topic: String
    /// What the route does then, for that client.
    public var actions: [MQTTAction]

    /// A rule for a subscription to `topic`.
    public init(topic: String, do actions: [MQTTAction]) {
        self.topic = topic
        self.actions = actions
    }
}

/// Something an MQTT route does for one client.
public enum MQTTAction: Sendable, Equatable {
    /// Sends the client a PUBLISH on `topic` at `qos` (0 or 1).
    case publish(topic: String, payload: Data, qos: Int, retain: Bool)
    /// Waits.
    case delay(Duration)
    /// Sends the first half of a PUBLISH, then drops the connection: the client reads a packet
    /// cut short.
    case dropMidPacket
    /// Closes the connection (MQTT 5: after a DISCONNECT with reason 0x00).
    case disconnect
    /// Drops the connection with no close frame.
    case drop

    /// Sends the client a QoS 0 PUBLISH of `text` on `topic`.
    public static func publish(_ topic: String, _ text: String, qos: Int = 0) -> MQTTAction {
        .publish(topic: topic, payload: Data(text.utf8), qos: qos, retain: false)
    }
}

/// MQTT topic names and filters (MQTT 3.1.1 section 4.7, MQTT 5 section 4.7).
enum MQTTTopic {
    /// A topic name: not empty, no wildcard, no NUL.
    static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && !name.contains { $0 == "+" || $0 == "#" || $0 == "\0" }
    }

    /// A filter: not empty; `#` alone in the last level, `+` alone in its level.
    static func isValidFilter(_ filter: String) -> Bool {
        guard !filter.isEmpty, !filter.contains("\0") else { return false }
        let levels = filter.split(separator: "/", omittingEmptySubsequences: false)
        for (index, level) in levels.enumerated() {
            if level.contains("#"), level != "#" || index != levels.count - 1 { return false }
            if level.contains("+"), level != "+" { return false }
        }
        return true
    }

    /// Whether `name` matches `filter`: `+` one level, `#` this level and all below (the parent
    /// too); a name starting with `$` is matched by no wildcard in the first level.
    static func matches(_ name: String, filter: String) -> Bool {
        let names = name.split(separator: "/", omittingEmptySubsequences: false)
        let filters = filter.split(separator: "/", omittingEmptySubsequences: false)
        if name.hasPrefix("$"), let first = filters.first, first == "+" || first == "#" { return false }
        var index = 0
        while index < filters.count {
            let level = filters[index]
            if level == "#" { return true }
            guard index < names.count else { return false }
            if level != "+", level != names[index] { return false }
            index += 1
        }
        return index == names.count
    }
}
