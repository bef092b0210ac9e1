/// An error of the server's lifecycle.
public struct DuplexServerError: Error, Hashable, Sendable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case stoppedBeforeListening
    }

    private let code: Code

    /// The server stopped before it started listening.
    public static let stoppedBeforeListening = DuplexServerError(code: .stoppedBeforeListening)

    public var description: String {
        switch code {
        case .stoppedBeforeListening: "the server stopped before it started listening"
        }
    }
}
