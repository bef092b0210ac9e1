import DuplexSchema
import Foundation

/// One extra request header, as seed 004 writes them: `.authorization(.bearer("token"))`.
///
/// ```swift
/// let request = SSERequest(
///     url: "https://example.com/events",
///     additionalHeaders: [.authorization(.bearer("YOUR_TOKEN")), .custom("X-Client-ID", "ios-app")]
/// )
/// ```
///
/// The dictionary form, `additionalHeaders: ["Authorization": "Bearer token"]`, is the same.
public struct HTTPHeader: Sendable, Hashable {
    /// The header's name.
    public var name: String
    /// The header's value.
    public var value: String

    /// A header with any name and value.
    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// A header with any name and value.
    public static func custom(_ name: String, _ value: String) -> HTTPHeader {
        HTTPHeader(name: name, value: value)
    }

    /// `Authorization`.
    public static func authorization(_ authorization: Authorization) -> HTTPHeader {
        HTTPHeader(name: "Authorization", value: authorization.value)
    }

    /// `Authorization`, under the name seed 004's WebSocket example uses.
    @available(*, deprecated, renamed: "authorization")
    public static func authentication(_ authorization: Authorization) -> HTTPHeader {
        .authorization(authorization)
    }

    /// `Content-Type`.
    public static func contentType(_ type: ContentType) -> HTTPHeader {
        HTTPHeader(name: "Content-Type", value: type.value)
    }

    /// The credentials of an `Authorization` header.
    public struct Authorization: Sendable, Hashable {
        /// The header value, such as `Bearer abc`.
        public var value: String

        /// `Bearer <token>`.
        public static func bearer(_ token: String) -> Authorization {
            Authorization(value: "Bearer \(token)")
        }

        /// `Basic <base64(user:password)>`.
        public static func basic(username: String, password: String) -> Authorization {
            Authorization(value: "Basic \(Data("\(username):\(password)".utf8).base64EncodedString())")
        }

        /// Any other scheme and credentials.
        public static func custom(_ value: String) -> Authorization {
            Authorization(value: value)
        }
    }

    /// A media type for `Content-Type`.
    public struct ContentType: Sendable, Hashable {
        /// The media type, such as `application/json`.
        public var value: String

        /// `application/json`.
        public static let json = ContentType(value: "application/json")
        /// `text/plain; charset=utf-8`.
        public static let text = ContentType(value: "text/plain; charset=utf-8")

        /// Any other media type.
        public static func custom(_ value: String) -> ContentType {
            ContentType(value: value)
        }
    }
}

extension [HTTPHeader] {
    /// The headers as a dictionary; a later header with the same name (any case) wins.
    var dictionary: [String: String] {
        var result: [String: String] = [:]
        for header in self {
            if let existing = result.keys.first(where: { $0.lowercased() == header.name.lowercased() }) {
                result.removeValue(forKey: existing)
            }
            result[header.name] = header.value
        }
        return result
    }
}

/// The check both clients make on the extra request headers before connecting: what NIO's
/// encoder would refuse (or what would split the request) is named instead.
enum RequestHeaderCheck {
    /// Why `headers` cannot be sent, or nil when they can.
    static func problem(_ headers: [String: String]) -> String? {
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) {
            if !HTTPToken.isToken(name) {
                return "the header name \(String(name.prefix(60)).debugDescription) is not an HTTP token"
            }
            if value.utf8.contains(where: { ($0 < 0x20 && $0 != 0x09) || $0 == 0x7F }) {
                return
                    "the value of the header \(name.prefix(60)) holds a control character (CR, LF, NUL or another): it would split or corrupt the request"
            }
        }
        return nil
    }
}
