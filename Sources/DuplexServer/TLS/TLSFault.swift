import DuplexHost
import Foundation
import NIOSSL

/// A TLS listener that is wrong in one way, like badssl.com's hosts but on loopback and for
/// WebSocket and SSE too. With ``DuplexServerTLS/faults`` on, the server opens one listener per
/// fault, each serving every route; `GET /tls-faults` answers a JSON object from each fault's
/// `rawValue` to its base URL. Each certificate is issued by the server's own
/// ``DuplexServerTLS/certificateAuthority`` unless the fault says otherwise, so a client that
/// trusts that CA sees exactly one thing wrong.
public enum TLSFault: String, CaseIterable, Sendable, Codable {
    /// A certificate whose validity ended yesterday. A client must refuse it.
    case expired
    /// A certificate valid from tomorrow. A client must refuse it.
    case notYetValid = "not-yet-valid"
    /// A certificate for `wrong-host.duplex.invalid` only, not for the address the client used. A
    /// client must refuse it.
    case wrongHost = "wrong-host"
    /// A certificate signed by its own key, issued by no CA. A client must refuse it.
    case selfSigned = "self-signed"
    /// A chain (leaf and root) to a root CA made for this listener, which no client trusts. A
    /// client must refuse it.
    case untrustedRoot = "untrusted-root"
    /// A leaf issued by an intermediate CA that the server does not send. A client must refuse
    /// it: TLS clients do not fetch missing intermediates.
    case incompleteChain = "incomplete-chain"
    /// A good certificate, but the server requires a client certificate issued by the server's
    /// CA. A client without one is refused in the handshake; one with such a certificate gets
    /// through.
    case clientCertificateRequired = "client-certificate-required"
    /// A good certificate, with TLS 1.2 at most. A client must get through (TLS 1.2 is still
    /// safe); one set to require TLS 1.3 must refuse it.
    case tls12Only = "tls12-only"
    /// A certificate from the server's CA whose key is 1,024-bit RSA, which OpenSSL's default
    /// security level and browsers refuse as too weak (NIST retired it in 2013). A client must
    /// refuse it. BoringSSL accepts it: Duplex's clients (WebSocket and SSE) check the size
    /// themselves.
    case weakKey = "weak-key"

    /// The TLS configuration of this fault's listener.
    func serverConfiguration(authority: DuplexCertificateAuthority, hosts: [String]) throws -> TLSConfiguration {
        let day: TimeInterval = 86_400
        switch self {
        case .expired:
            let issued = try authority.issue(
                hosts: hosts, notValidBefore: Date(timeIntervalSinceNow: -30 * day), notValidAfter: Date(timeIntervalSinceNow: -day))
            return try DuplexServerTLS.serverConfiguration(chainPEM: issued.chainPEM, keyPEM: issued.privateKeyPEM, clientCAPEM: nil)
        case .notYetValid:
            let issued = try authority.issue(
                hosts: hosts, notValidBefore: Date(timeIntervalSinceNow: day), notValidAfter: Date(timeIntervalSinceNow: 30 * day))
            return try DuplexServerTLS.serverConfiguration(chainPEM: issued.chainPEM, keyPEM: issued.privateKeyPEM, clientCAPEM: nil)
        case .wrongHost:
            let issued = try authority.issue(hosts: ["wrong-host.duplex.invalid"])
            return try DuplexServerTLS.serverConfiguration(chainPEM: issued.chainPEM, keyPEM: issued.privateKeyPEM, clientCAPEM: nil)
        case .selfSigned:
            let issued = try DuplexCertificateAuthority.selfSignedLeaf(hosts: hosts)
            return try DuplexServerTLS.serverConfiguration(chainPEM: issued.chainPEM, keyPEM: issued.privateKeyPEM, clientCAPEM: nil)
        case .untrustedRoot:
            let root = try DuplexCertificateAuthority(commonName: "Duplex untrusted root CA")
            let issued = try root.issue(hosts: hosts)
            return try DuplexServerTLS.serverConfiguration(
                chainPEM: issued.chainPEM + "\n" + root.certificatePEM, keyPEM: issued.privateKeyPEM, clientCAPEM: nil)
        case .incompleteChain:
            let issued = try authority.intermediate().issue(hosts: hosts)
            return try DuplexServerTLS.serverConfiguration(chainPEM: issued.certificatePEM, keyPEM: issued.privateKeyPEM, clientCAPEM: nil)
        case .clientCertificateRequired:
            let issued = try authority.issue(hosts: hosts)
            return try DuplexServerTLS.serverConfiguration(
                chainPEM: issued.chainPEM, keyPEM: issued.privateKeyPEM, clientCAPEM: authority.certificatePEM)
        case .weakKey:
            let issued = try authority.issueWithWeakKey(hosts: hosts)
            return try DuplexServerTLS.serverConfiguration(chainPEM: issued.chainPEM, keyPEM: issued.privateKeyPEM, clientCAPEM: nil)
        case .tls12Only:
            let issued = try authority.issue(hosts: hosts)
            var tls = try DuplexServerTLS.serverConfiguration(chainPEM: issued.chainPEM, keyPEM: issued.privateKeyPEM, clientCAPEM: nil)
            tls.maximumTLSVersion = .tlsv12
            return tls
        }
    }
}
