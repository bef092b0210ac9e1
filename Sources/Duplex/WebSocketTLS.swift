import Foundation

/// Which server certificates a `wss://` connection trusts.
///
/// ```swift
/// .systemRoots                                            // the default
/// .certificateAuthority(pem: caPEM)                       // your own CA, or a self-signed certificate
/// try .certificateAuthority(pemFile: "/path/to/ca.pem")
/// .insecureAcceptAnyCertificate                           // no verification at all: local tests only
/// ```
public struct WebSocketTLSTrust: Sendable, Hashable {
    enum Value: Sendable, Hashable {
        case systemRoots
        case certificateAuthority(pem: String)
        case insecureAcceptAnyCertificate
    }

    let value: Value

    /// The operating system's trusted roots.
    public static let systemRoots = WebSocketTLSTrust(value: .systemRoots)

    /// Only certificates issued by the CA certificates in `pem` (one or more PEM blocks). A
    /// self-signed server certificate can be trusted this way by passing that certificate.
    public static func certificateAuthority(pem: String) -> WebSocketTLSTrust {
        WebSocketTLSTrust(value: .certificateAuthority(pem: pem))
    }

    /// Like ``certificateAuthority(pem:)``, reading the PEM from a file.
    /// - Throws: when the file cannot be read.
    public static func certificateAuthority(pemFile path: String) throws -> WebSocketTLSTrust {
        .certificateAuthority(pem: try String(contentsOfFile: path, encoding: .utf8))
    }

    /// Accept any certificate, for any host name. Anyone on the path can read and change the
    /// traffic: for local testing only.
    public static let insecureAcceptAnyCertificate = WebSocketTLSTrust(value: .insecureAcceptAnyCertificate)
}
