/// An error of the server's lifecycle or configuration.
public struct DuplexServerError: Error, Hashable, Sendable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case stoppedBeforeListening
        case invalidTLSConfiguration(String)
        case invalidRoutes(String)
    }

    private let code: Code

    /// The server stopped before it started listening.
    public static let stoppedBeforeListening = DuplexServerError(code: .stoppedBeforeListening)

    /// The TLS settings cannot be used: a file that cannot be read, a PEM with no certificate or
    /// key, a key that does not match its certificate; the reason says which.
    public static func invalidTLSConfiguration(_ reason: String) -> DuplexServerError {
        DuplexServerError(code: .invalidTLSConfiguration(reason))
    }

    /// The scripted routes cannot be served: one clashes with a built-in route or another
    /// scripted one, or has a path or method no route can have; the reason says which.
    public static func invalidRoutes(_ reason: String) -> DuplexServerError {
        DuplexServerError(code: .invalidRoutes(reason))
    }

    public var description: String {
        switch code {
        case .stoppedBeforeListening: "the server stopped before it started listening"
        case .invalidTLSConfiguration(let reason): "TLS: \(reason)"
        case .invalidRoutes(let reason): "scripted routes: \(reason)"
        }
    }
}
