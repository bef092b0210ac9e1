import DuplexHost
import Foundation
import NIOCore
import NIOSSL

/// TLS for the server: every route over `wss://` and `https://`, optionally with client
/// certificates required (mutual TLS) and the TLS fault listeners (``TLSFault``).
///
/// ```swift
/// var configuration = DuplexServerConfiguration(port: 0)
/// configuration.tls = try .selfSigned()                  // a CA and a certificate for localhost, made now
/// let caPEM = configuration.tls?.certificateAuthorityPEM // what a client trusts
/// ```
public struct DuplexServerTLS: Sendable {
    /// The server's certificate followed by any intermediates, PEM.
    public var certificateChainPEM: String
    /// The server certificate's private key, PEM (PKCS #8, or the traditional RSA or EC forms).
    public var privateKeyPEM: String
    /// The authority that issued the server's certificate, when the server made it
    /// (``selfSigned(hosts:)``): the TLS faults are issued by it too, so that each is wrong in
    /// one way only. Nil for a certificate read from files.
    public var certificateAuthority: DuplexCertificateAuthority?
    /// When set, every connection must present a client certificate issued by one of the CA
    /// certificates in this PEM (mutual TLS); one without is refused in the TLS handshake.
    public var clientCertificateAuthorityPEM: String?
    /// Whether the server also opens one listener per ``TLSFault``, each serving every route
    /// with a certificate or setting that is wrong in one way; `GET /tls-faults` lists their
    /// URLs. Needs ``certificateAuthority``. Default false.
    public var faults: Bool

    /// The PEM of the CA a client trusts to reach the server, when the server made it.
    public var certificateAuthorityPEM: String? { certificateAuthority?.certificatePEM }

    /// TLS with the certificate and key you give, PEM.
    public init(
        certificateChainPEM: String,
        privateKeyPEM: String,
        certificateAuthority: DuplexCertificateAuthority? = nil,
        clientCertificateAuthorityPEM: String? = nil,
        faults: Bool = false
    ) {
        self.certificateChainPEM = certificateChainPEM
        self.privateKeyPEM = privateKeyPEM
        self.certificateAuthority = certificateAuthority
        self.clientCertificateAuthorityPEM = clientCertificateAuthorityPEM
        self.faults = faults
    }

    /// TLS with the certificate chain and key in these PEM files.
    /// - Throws: ``DuplexServerError/invalidTLSConfiguration(_:)`` naming a file that cannot be read.
    public init(certificateChainFile: String, privateKeyFile: String) throws {
        self.init(
            certificateChainPEM: try Self.read(certificateChainFile, "certificate"), privateKeyPEM: try Self.read(privateKeyFile, "private key"))
    }

    /// TLS with a certificate made now: a new CA (``certificateAuthority``, whose PEM
    /// clients trust) issues a certificate for `hosts`, valid for 30 days.
    /// - Parameter hosts: host names and IP addresses the certificate names. Default
    ///   `localhost`, `127.0.0.1` and `::1`.
    /// - Throws: when a certificate cannot be made (an empty host name).
    public static func selfSigned(hosts: [String] = defaultHosts) throws -> DuplexServerTLS {
        let authority = try DuplexCertificateAuthority()
        let issued = try authority.issue(hosts: hosts)
        return DuplexServerTLS(certificateChainPEM: issued.chainPEM, privateKeyPEM: issued.privateKeyPEM, certificateAuthority: authority)
    }

    /// The names a made certificate is for by default: `localhost`, `127.0.0.1` and `::1`.
    public static let defaultHosts = ["localhost", "127.0.0.1", "::1"]

    /// Reads a PEM file for the configuration.
    /// - Throws: ``DuplexServerError/invalidTLSConfiguration(_:)`` naming the file.
    static func read(_ path: String, _ what: String) throws -> String {
        do {
            return try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw DuplexServerError.invalidTLSConfiguration("cannot read the \(what) file \(path): \(error.localizedDescription)")
        }
    }
}

extension DuplexServerTLS {
    /// The NIOSSL server configuration: this certificate and key, client certificates required
    /// when a client CA is set, ALPN `http/1.1`, and at most 1 s waiting for a peer's
    /// close_notify.
    /// - Throws: ``DuplexServerError/invalidTLSConfiguration(_:)`` for a PEM with no certificate
    ///   or an unreadable key.
    func serverConfiguration() throws -> TLSConfiguration {
        try Self.serverConfiguration(chainPEM: certificateChainPEM, keyPEM: privateKeyPEM, clientCAPEM: clientCertificateAuthorityPEM)
    }

    static func serverConfiguration(chainPEM: String, keyPEM: String, clientCAPEM: String?) throws -> TLSConfiguration {
        let chain = try certificates(chainPEM, "the server's certificate chain")
        let key: NIOSSLPrivateKey
        do {
            key = try NIOSSLPrivateKey(bytes: Array(keyPEM.utf8), format: .pem)
        } catch {
            throw DuplexServerError.invalidTLSConfiguration("the private key PEM could not be read: \(error)")
        }
        var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
        tls.applicationProtocols = ["http/1.1"]
        // After its close_notify, the server waits this long for the peer's before it closes
        // the socket (NIOSSL's default is 5 s): a client that went away must not hold a
        // connection, or a graceful shutdown, that long.
        tls.shutdownTimeout = .seconds(1)
        if let clientCAPEM {
            tls.trustRoots = .certificates(try certificates(clientCAPEM, "the client CA"))
            // On a server, verification means a client certificate is required.
            tls.certificateVerification = .noHostnameVerification
        }
        return tls
    }

    static func certificates(_ pem: String, _ what: String) throws -> [NIOSSLCertificate] {
        let certificates: [NIOSSLCertificate]
        do {
            certificates = try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8))
        } catch {
            throw DuplexServerError.invalidTLSConfiguration("\(what) PEM could not be read: \(error)")
        }
        guard !certificates.isEmpty else { throw DuplexServerError.invalidTLSConfiguration("\(what) PEM holds no certificate") }
        return certificates
    }
}
