import Foundation

/// A JSON value, to compare two texts as JSON: replay matching and scripted routes compare
/// messages with it.
package enum JSONValue: Decodable, Equatable, Sendable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    package init?(_ text: String) {
        guard let value = try? JSONDecoder().decode(JSONValue.self, from: Data(text.utf8)) else { return nil }
        self = value
    }

    package init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    /// Whether this value has `pattern`'s members, at every depth (an object may have more);
    /// any other value must equal it.
    package func contains(_ pattern: JSONValue) -> Bool {
        switch (self, pattern) {
        case (.object(let members), .object(let wanted)):
            wanted.allSatisfy { key, value in members[key]?.contains(value) ?? false }
        default:
            self == pattern
        }
    }

    /// The value without the object fields named `fields`, at every depth.
    package func removing(_ fields: Set<String>) -> JSONValue {
        switch self {
        case .array(let values): .array(values.map { $0.removing(fields) })
        case .object(let members): .object(members.filter { !fields.contains($0.key) }.mapValues { $0.removing(fields) })
        default: self
        }
    }
}
