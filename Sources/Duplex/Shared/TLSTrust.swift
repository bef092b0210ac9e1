import Foundation
import NIOSSL

/// Which server certificates a `wss://` or `https://` connection trusts.
///
/// ```swift
/// .systemRoots                                            // the default
/// .certificateAuthority(pem: caPEM)                       // your own CA, or a self-signed certificate
/// try .certificateAuthority(pemFile: "/path/to/ca.pem")
/// .insecureAcceptAnyCertificate                           // no verification at all: local tests only
/// ```
public struct TLSTrust: Sendable, Hashable {
    enum Value: Sendable, Hashable {
        case systemRoots
        case certificateAuthority(pem: String)
        case insecureAcceptAnyCertificate
    }

    let value: Value

    /// The operating system's trusted roots.
    public static let systemRoots = TLSTrust(value: .systemRoots)

    /// Only certificates issued by the CA certificates in `pem` (one or more PEM blocks). A
    /// self-signed server certificate can be trusted this way by passing that certificate.
    public static func certificateAuthority(pem: String) -> TLSTrust {
        TLSTrust(value: .certificateAuthority(pem: pem))
    }

    /// Like ``certificateAuthority(pem:)``, reading the PEM from a file.
    /// - Throws: when the file cannot be read.
    public static func certificateAuthority(pemFile path: String) throws -> TLSTrust {
        .certificateAuthority(pem: try String(contentsOfFile: path, encoding: .utf8))
    }

    /// Accept any certificate, for any host name. Anyone on the path can read and change the
    /// traffic: for local testing only.
    public static let insecureAcceptAnyCertificate = TLSTrust(value: .insecureAcceptAnyCertificate)
}

extension TLSTrust {
    /// The NIOSSL client configuration for this trust.
    /// - Throws: ``WebSocketError`` with code ``WebSocketError/Code/tlsFailed`` for an unreadable CA.
    func clientConfiguration() throws -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        switch value {
        case .systemRoots:
            break
        case .certificateAuthority(let pem):
            let certificates: [NIOSSLCertificate]
            do {
                certificates = try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8))
            } catch {
                throw WebSocketError(.tlsFailed, "the CA PEM could not be read: \(error)")
            }
            guard !certificates.isEmpty else { throw WebSocketError(.tlsFailed, "the CA PEM holds no certificate") }
            tls.trustRoots = .certificates(certificates)
        case .insecureAcceptAnyCertificate:
            tls.certificateVerification = .none
        }
        return tls
    }
}
