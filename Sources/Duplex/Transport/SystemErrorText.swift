#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import NIOCore
import NIOPosix

/// Short, plain descriptions of system and connection errors, for the messages of
/// ``WebSocketError`` and ``SSEError``: "connection refused", not NIO's
/// "connection reset (error set): Connection refused) (errno: 111)".
enum SystemErrorText {
    /// A plain description of `error`.
    static func describe(_ error: any Error) -> String {
        switch error {
        case let error as IOError:
            return message(errno: error.errnoCode)
        case let error as NIOConnectionError:
            if let first = error.connectionErrors.first { return describe(first.error) }
            if error.dnsAError != nil || error.dnsAAAAError != nil { return "the host name could not be resolved" }
            return "no address could be reached"
        default:
            return "\(error)"
        }
    }

    /// The system's text for an errno, starting in lower case: "connection refused".
    static func message(errno code: CInt) -> String {
        guard let text = strerror(code) else { return "error \(code)" }
        let message = String(cString: text)
        return message.prefix(1).lowercased() + message.dropFirst()
    }
}
