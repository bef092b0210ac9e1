/// A WebSocket close status code (RFC 6455 section 7.4).
///
/// The well-known codes of the IANA "WebSocket Close Code Number" registry are static members.
/// Codes 3000-3999 are for libraries and frameworks, 4000-4999 for applications.
///
/// ```swift
/// let code = WebSocketCloseCode.goingAway
/// code.rawValue        // 1001
/// code.isSendable      // true: may appear in a close frame
/// WebSocketCloseCode.abnormalClosure.isSendable // false: reported locally only
/// ```
public struct WebSocketCloseCode: RawRepresentable, Hashable, Sendable, Codable, CustomStringConvertible, ExpressibleByIntegerLiteral {
    /// The numeric code.
    public var rawValue: UInt16

    /// Creates a close code from its number. Any number is accepted; see ``isSendable`` and ``isValidOnWire``.
    public init(rawValue: UInt16) {
        self.rawValue = rawValue
    }

    /// Creates a close code from its number.
    public init(_ rawValue: UInt16) {
        self.rawValue = rawValue
    }

    /// Creates a close code from a number literal: `close(code: 1001, reason: "bye")`.
    public init(integerLiteral value: UInt16) {
        self.rawValue = value
    }

    /// Creates an application close code (4000-4999), or returns nil for a number outside that range.
    public static func application(_ value: UInt16) -> WebSocketCloseCode? {
        (4000...4999).contains(value) ? WebSocketCloseCode(value) : nil
    }

    /// 1000: the purpose of the connection has been fulfilled.
    public static let normalClosure = WebSocketCloseCode(1000)
    /// 1001: the endpoint is going away (server shutdown, page navigation).
    public static let goingAway = WebSocketCloseCode(1001)
    /// 1002: the peer violated the protocol.
    public static let protocolError = WebSocketCloseCode(1002)
    /// 1003: a data type the endpoint cannot accept.
    public static let unsupportedData = WebSocketCloseCode(1003)
    /// 1005: no status code was present in the close frame (never sent on the wire).
    public static let noStatusReceived = WebSocketCloseCode(1005)
    /// 1006: the connection closed without a close frame (never sent on the wire).
    public static let abnormalClosure = WebSocketCloseCode(1006)
    /// 1007: message data was inconsistent with its type, such as invalid UTF-8 in a text message.
    public static let invalidFramePayloadData = WebSocketCloseCode(1007)
    /// 1008: a message violated the endpoint's policy.
    public static let policyViolation = WebSocketCloseCode(1008)
    /// 1009: a message was too big to process.
    public static let messageTooBig = WebSocketCloseCode(1009)
    /// 1010: the client expected the server to negotiate an extension.
    public static let mandatoryExtension = WebSocketCloseCode(1010)
    /// 1011: the server met an unexpected condition.
    public static let internalServerError = WebSocketCloseCode(1011)
    /// 1012: the service is restarting.
    public static let serviceRestart = WebSocketCloseCode(1012)
    /// 1013: try again later, for example because the peer cannot keep up (a slow consumer).
    public static let tryAgainLater = WebSocketCloseCode(1013)
    /// 1014: a gateway received an invalid response from upstream.
    public static let badGateway = WebSocketCloseCode(1014)
    /// 1015: the TLS handshake failed (never sent on the wire).
    public static let tlsHandshake = WebSocketCloseCode(1015)

    /// Whether the code is in the application range 4000-4999.
    public var isApplication: Bool { (4000...4999).contains(rawValue) }

    /// Whether the code is in the range registered for libraries and frameworks, 3000-3999.
    public var isLibrary: Bool { (3000...3999).contains(rawValue) }

    /// Whether an endpoint may put this code in a close frame it sends.
    ///
    /// 1005, 1006 and 1015 are reserved for reporting a closure locally, and 1004 and the
    /// unassigned numbers below 3000 are not to be sent (RFC 6455 section 7.4.1).
    public var isSendable: Bool {
        switch rawValue {
        case 1000...1003, 1007...1014, 3000...4999: true
        default: false
        }
    }

    /// Whether a received close frame may carry this code. A frame with any other code is a
    /// protocol error (close 1002).
    public var isValidOnWire: Bool { isSendable }

    /// The registry name of a well-known code, such as "Going Away".
    public var name: String? {
        switch rawValue {
        case 1000: "Normal Closure"
        case 1001: "Going Away"
        case 1002: "Protocol Error"
        case 1003: "Unsupported Data"
        case 1005: "No Status Received"
        case 1006: "Abnormal Closure"
        case 1007: "Invalid Frame Payload Data"
        case 1008: "Policy Violation"
        case 1009: "Message Too Big"
        case 1010: "Mandatory Extension"
        case 1011: "Internal Server Error"
        case 1012: "Service Restart"
        case 1013: "Try Again Later"
        case 1014: "Bad Gateway"
        case 1015: "TLS Handshake"
        default: nil
        }
    }

    public var description: String {
        if let name { return "\(rawValue) (\(name))" }
        if isApplication { return "\(rawValue) (application)" }
        if isLibrary { return "\(rawValue) (library)" }
        return "\(rawValue)"
    }

    public init(from decoder: any Decoder) throws {
        self.rawValue = try decoder.singleValueContainer().decode(UInt16.self)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }
}
