import Foundation

/// A protocol violation: the packet or byte that breaks MQTT, and MQTT 5's reason code for it.
struct MQTTViolation: Error {
    var reason: String
    /// 0x81 malformed packet, 0x82 protocol error, 0x95 packet too large, 0x8D keep-alive timeout.
    var code: UInt8 = 0x81
}

/// The bytes a client sent, kept until they hold whole packets: a WebSocket message may carry
/// part of a packet or several.
struct MQTTPacketBuffer {
    private var bytes: [UInt8] = []
    let maxPacketBytes: Int

    init(maxPacketBytes: Int) {
        self.maxPacketBytes = maxPacketBytes
    }

    mutating func append(_ data: Data) {
        bytes.append(contentsOf: data)
    }

    /// The next whole packet: its first byte and its body; nil until one is whole.
    mutating func next() throws(MQTTViolation) -> (header: UInt8, body: [UInt8])? {
        guard bytes.count >= 2 else { return nil }
        var length = 0
        var index = 1
        while true {
            guard index < bytes.count else { return nil }
            guard index <= 4 else { throw MQTTViolation(reason: "a remaining length longer than 4 bytes") }
            let byte = bytes[index]
            length |= Int(byte & 0x7F) << (7 * (index - 1))
            index += 1
            if byte & 0x80 == 0 { break }
        }
        guard index + length <= maxPacketBytes else {
            throw MQTTViolation(reason: "a packet of \(index + length) bytes, over the route's \(maxPacketBytes)", code: 0x95)
        }
        guard bytes.count >= index + length else { return nil }
        let packet = (bytes[0], Array(bytes[index..<(index + length)]))
        bytes.removeFirst(index + length)
        return packet
    }
}

/// Reads a packet's body.
struct MQTTReader {
    private let bytes: [UInt8]
    private(set) var offset = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    var isAtEnd: Bool { offset >= bytes.count }
    var rest: [UInt8] { Array(bytes[min(offset, bytes.count)...]) }

    mutating func byte() throws(MQTTViolation) -> UInt8 {
        guard offset < bytes.count else { throw MQTTViolation(reason: "a packet shorter than its fields") }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func uint16() throws(MQTTViolation) -> Int {
        Int(try byte()) << 8 | Int(try byte())
    }

    mutating func binary() throws(MQTTViolation) -> [UInt8] {
        let count = try uint16()
        guard offset + count <= bytes.count else { throw MQTTViolation(reason: "a string longer than its packet") }
        defer { offset += count }
        return Array(bytes[offset..<(offset + count)])
    }

    mutating func string() throws(MQTTViolation) -> String {
        guard let text = String(validating: try binary(), as: UTF8.self) else { throw MQTTViolation(reason: "a string that is not UTF-8") }
        return text
    }

    /// Skips MQTT 5 properties.
    mutating func skipProperties() throws(MQTTViolation) {
        var length = 0
        for shift in 0..<4 {
            let byte = try byte()
            length |= Int(byte & 0x7F) << (7 * shift)
            if byte & 0x80 == 0 { break }
            if shift == 3 { throw MQTTViolation(reason: "a property length longer than 4 bytes") }
        }
        guard offset + length <= bytes.count else { throw MQTTViolation(reason: "properties longer than their packet") }
        offset += length
    }
}

/// Writes packets.
enum MQTTWriter {
    static func packet(_ header: UInt8, _ body: [UInt8]) -> Data {
        var out: [UInt8] = [header]
        var length = body.count
        repeat {
            var byte = UInt8(length & 0x7F)
            length >>= 7
            if length > 0 { byte |= 0x80 }
            out.append(byte)
        } while length > 0
        return Data(out + body)
    }

    static func string(_ text: String) -> [UInt8] {
        uint16(text.utf8.count) + Array(text.utf8)
    }

    static func uint16(_ value: Int) -> [UInt8] {
        [UInt8(value >> 8 & 0xFF), UInt8(value & 0xFF)]
    }

    /// A PUBLISH, with no properties for MQTT 5.
    static func publish(topic: String, payload: Data, qos: Int, retain: Bool, id: Int, version: UInt8) -> Data {
        var body = string(topic)
        if qos > 0 { body += uint16(id) }
        if version == 5 { body.append(0) }
        body += payload
        return packet(0x30 | UInt8(qos << 1) | (retain ? 1 : 0), body)
    }

    /// How a journal shows a payload: its text when it is UTF-8, else its size.
    static func describe(_ payload: Data) -> String {
        if let text = String(validating: payload, as: UTF8.self) { return ScriptJournal.excerpt(text).debugDescription }
        return "\(payload.count) bytes"
    }
}
