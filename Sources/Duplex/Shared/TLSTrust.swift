import Foundation
import NIOSSL

/// Which server certificates a `wss://` or `https://` connection trusts.
///
/// ```swift
/// .systemRoots                                            // the default
/// .certificateAuthority(pem: caPEM)                       // your own CA, or a self-signed certificate
/// try .certificateAuthority(pemFile: "/path/to/ca.pem")
/// .insecureAcceptAnyCertificate                           // no verification at all: local tests only
/// .systemRoots.pinning(publicKeySHA256: ["sha256//Ma1S…="])  // and the server's key must be one of these
/// ```
public struct TLSTrust: Sendable, Hashable {
    enum Value: Sendable, Hashable {
        case systemRoots
        case certificateAuthority(pem: String)
        case insecureAcceptAnyCertificate
    }

    let value: Value
    /// The SHA-256 digests (base64) of the SubjectPublicKeyInfo of the keys a server may present.
    var pins: Set<String> = []

    /// The operating system's trusted roots.
    public static let systemRoots = TLSTrust(value: .systemRoots)

    /// This trust, and the server's public key must also be one of `pins`: the base64 SHA-256 of
    /// its SubjectPublicKeyInfo, as curl's `--pinnedpubkey` takes them (`sha256//` in front is
    /// optional; separate several with `;` or pass several). Pins add to the chain and host-name
    /// checks, never replace them; list the next key too, before you rotate to it. A mismatch
    /// fails the connection with ``WebSocketError/Code/tlsFailed`` (`pin mismatch`) before any
    /// request is sent, for WebSocket and SSE alike (``SSEError/Code/tlsFailed`` there).
    public func pinning(publicKeySHA256 pins: [String]) -> TLSTrust {
        var trust = self
        for pin in pins.flatMap({ $0.split(separator: ";") }) {
            let trimmed = pin.trimmingCharacters(in: .whitespaces)
            trust.pins.insert(trimmed.hasPrefix("sha256//") ? String(trimmed.dropFirst("sha256//".count)) : trimmed)
        }
        return trust
    }

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
    /// The NIOSSL client configuration for this trust, presenting `identity` when the server
    /// asks for a client certificate.
    /// - Throws: ``WebSocketError`` with code ``WebSocketError/Code/tlsFailed`` for an unreadable CA.
    func clientConfiguration(identity: TLSIdentity? = nil) throws -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        try identity?.apply(to: &tls)
        for pin in pins where Data(base64Encoded: pin)?.count != 32 {
            throw WebSocketError(
                .tlsFailed, "the pin \(pin.prefix(60).debugDescription) is not a base64 SHA-256 digest (44 characters, as curl's sha256//… takes it)")
        }
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
            guard pins.isEmpty else {
                throw WebSocketError(
                    .tlsFailed,
                    "public-key pins add to certificate verification, and insecureAcceptAnyCertificate turns it off: pin with systemRoots or certificateAuthority"
                )
            }
            tls.certificateVerification = .none
        }
        return tls
    }
}

/// A client certificate and its private key, presented when a server asks for one (mutual
/// TLS): set ``WebSocketConfiguration/tlsIdentity`` or ``SSEConfiguration/tlsIdentity``.
///
/// ```swift
/// configuration.tlsIdentity = try .pemFiles(certificateChain: "client.pem", privateKey: "client-key.pem")
/// ```
public struct TLSIdentity: Sendable, Hashable {
    let certificateChainPEM: String
    let privateKeyPEM: String

    /// The certificate (followed by any intermediates) and its key, PEM.
    public static func pem(certificateChain: String, privateKey: String) -> TLSIdentity {
        TLSIdentity(certificateChainPEM: certificateChain, privateKeyPEM: privateKey)
    }

    /// Like ``pem(certificateChain:privateKey:)``, reading both from files.
    /// - Throws: when a file cannot be read.
    public static func pemFiles(certificateChain: String, privateKey: String) throws -> TLSIdentity {
        .pem(
            certificateChain: try String(contentsOfFile: certificateChain, encoding: .utf8),
            privateKey: try String(contentsOfFile: privateKey, encoding: .utf8))
    }

    /// Puts the identity into a NIOSSL client configuration.
    /// - Throws: ``WebSocketError`` with code ``WebSocketError/Code/tlsFailed`` for a PEM that
    ///   holds no certificate or no readable key.
    func apply(to tls: inout TLSConfiguration) throws {
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
        do {
            chain = try NIOSSLCertificate.fromPEMBytes(Array(certificateChainPEM.utf8))
        } catch {
            throw WebSocketError(.tlsFailed, "the client certificate PEM could not be read: \(error)")
        }
        guard !chain.isEmpty else { throw WebSocketError(.tlsFailed, "the client certificate PEM holds no certificate") }
        do {
            key = try NIOSSLPrivateKey(bytes: Array(privateKeyPEM.utf8), format: .pem)
        } catch {
            throw WebSocketError(.tlsFailed, "the client private key PEM could not be read: \(error)")
        }
        tls.certificateChain = chain.map { .certificate($0) }
        tls.privateKey = .privateKey(key)
    }
}
