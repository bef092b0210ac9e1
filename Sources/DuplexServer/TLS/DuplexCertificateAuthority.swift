import DuplexHost
import Crypto
import _CryptoExtras
public import Foundation
import SwiftASN1
import X509

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A certificate authority made in memory, for tests: it issues server and client certificates
/// for the names and addresses you give, with the validity you give.
///
/// `duplex-server --tls-self-signed` makes one at start and serves a certificate it issued;
/// ``DuplexServerTLS/selfSigned(hosts:)`` does the same in process. To test mutual TLS, issue a
/// client certificate from the same authority and trust it with
/// ``DuplexServerTLS/clientCertificateAuthorityPEM``.
///
/// ```swift
/// let authority = try DuplexCertificateAuthority()
/// let server = try authority.issue(hosts: ["localhost", "127.0.0.1"])
/// let client = try authority.issue(commonName: "alice", hosts: [], usage: .client)
/// ```
///
/// Keys are P-256; certificates are signed with ECDSA and SHA-256.
public struct DuplexCertificateAuthority: Sendable {
    /// The authority's own certificate, PEM: what a client trusts.
    public let certificatePEM: String
    /// The certificates between the authority and what it issues, leaf side first, PEM: empty
    /// for a root; an intermediate made by ``intermediate(commonName:)`` holds its own.
    public let chainPEM: [String]
    let name: DistinguishedName
    let key: P256.Signing.PrivateKey
    let keyIdentifier: ArraySlice<UInt8>

    /// What an issued certificate is for.
    public enum Usage: Sendable {
        /// A TLS server (extended key usage serverAuth).
        case server
        /// A TLS client, for mutual TLS (clientAuth).
        case client
    }

    /// A certificate and its private key, PEM.
    public struct Issued: Sendable {
        /// The leaf certificate alone.
        public let certificatePEM: String
        /// The leaf followed by every intermediate up to (not including) the root: what a
        /// server or client presents.
        public let chainPEM: String
        /// The private key, PKCS #8.
        public let privateKeyPEM: String
        /// The SHA-256 of the certificate's SubjectPublicKeyInfo, base64: the value a client
        /// pins (curl's `--pinnedpubkey sha256//…`).
        public let publicKeySHA256: String
    }

    /// Makes a root authority with a new key.
    /// - Parameters:
    ///   - commonName: the authority's name, as clients report it.
    ///   - notValidBefore: by default an hour ago (clocks differ).
    ///   - notValidAfter: by default in a year.
    /// - Throws: when the certificate cannot be encoded (not expected).
    public init(commonName: String = "Duplex test CA", notValidBefore: Date? = nil, notValidAfter: Date? = nil) throws {
        self = try Self.make(commonName: commonName, notValidBefore: notValidBefore, notValidAfter: notValidAfter, issuer: nil)
    }

    /// A new authority with its own key: a root (signed by that key), or an intermediate that
    /// `issuer` signs.
    private static func make(commonName: String, notValidBefore: Date?, notValidAfter: Date?, issuer: DuplexCertificateAuthority?) throws
        -> DuplexCertificateAuthority
    {
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName {
            OrganizationName("Duplex")
            CommonName(commonName)
        }
        let publicKey = Certificate.PublicKey(key.publicKey)
        let identifier = SubjectKeyIdentifier(hash: publicKey)
        let certificate = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: publicKey,
            notValidBefore: notValidBefore ?? Date(timeIntervalSinceNow: -3600),
            notValidAfter: notValidAfter ?? Date(timeIntervalSinceNow: 365 * 86_400),
            issuer: issuer?.name ?? name,
            subject: name,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                // An intermediate issues leaves only.
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: issuer == nil ? nil : 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                identifier
                if let issuer { AuthorityKeyIdentifier(keyIdentifier: issuer.keyIdentifier) }
            },
            issuerPrivateKey: .init(issuer?.key ?? key)
        )
        let pem = try certificate.serializeAsPEM().pemString
        let chain = issuer.map { [pem] + $0.chainPEM } ?? []
        return DuplexCertificateAuthority(certificatePEM: pem, chainPEM: chain, name: name, key: key, keyIdentifier: identifier.keyIdentifier)
    }

    private init(certificatePEM: String, chainPEM: [String], name: DistinguishedName, key: P256.Signing.PrivateKey, keyIdentifier: ArraySlice<UInt8>)
    {
        self.certificatePEM = certificatePEM
        self.chainPEM = chainPEM
        self.name = name
        self.key = key
        self.keyIdentifier = keyIdentifier
    }

    /// Makes an intermediate authority that this one signs. What the intermediate issues
    /// carries it in ``Issued/chainPEM``.
    /// - Throws: when the certificate cannot be encoded (not expected).
    public func intermediate(commonName: String = "Duplex test intermediate CA") throws -> DuplexCertificateAuthority {
        try Self.make(commonName: commonName, notValidBefore: nil, notValidAfter: nil, issuer: self)
    }

    /// Issues a certificate.
    /// - Parameters:
    ///   - commonName: the subject's common name; by default the first host, or "duplex".
    ///   - hosts: DNS names and IP addresses (IPv4 or IPv6) for the subjectAltName extension,
    ///     which is what clients check a host name against.
    ///   - usage: a server or a client certificate.
    ///   - notValidBefore: by default an hour ago.
    ///   - notValidAfter: by default in 30 days.
    /// - Throws: ``DuplexServerError/invalidTLSConfiguration(_:)`` for an empty host name; an
    ///   encoding error (not expected).
    public func issue(
        commonName: String? = nil,
        hosts: [String],
        usage: Usage = .server,
        notValidBefore: Date? = nil,
        notValidAfter: Date? = nil
    ) throws -> Issued {
        try Self.leaf(commonName: commonName, hosts: hosts, usage: usage, notValidBefore: notValidBefore, notValidAfter: notValidAfter, issuer: self)
    }

    /// Issues a server certificate with a 1,024-bit RSA key, too weak to trust: what the
    /// `weak-key` TLS fault serves.
    func issueWithWeakKey(hosts: [String]) throws -> Issued {
        try Self.leaf(commonName: nil, hosts: hosts, usage: .server, notValidBefore: nil, notValidAfter: nil, issuer: self, weakKey: true)
    }

    /// Issues a certificate signed by its own key, by no authority (its issuer is its
    /// subject): what the `self-signed` TLS fault serves.
    static func selfSignedLeaf(hosts: [String]) throws -> Issued {
        try leaf(commonName: nil, hosts: hosts, usage: .server, notValidBefore: nil, notValidAfter: nil, issuer: nil)
    }

    /// A leaf certificate: signed by `issuer`, or by its own key when nil.
    private static func leaf(
        commonName: String?,
        hosts: [String],
        usage: Usage,
        notValidBefore: Date?,
        notValidAfter: Date?,
        issuer: DuplexCertificateAuthority?,
        weakKey: Bool = false
    ) throws -> Issued {
        let key = P256.Signing.PrivateKey()
        let publicKey: Certificate.PublicKey
        let privateKeyPEM: String
        let spki: Data
        if weakKey {
            let rsa = try _RSA.Signing.PrivateKey(unsafeKeySize: .init(bitCount: 1024))
            (publicKey, privateKeyPEM, spki) = (Certificate.PublicKey(rsa.publicKey), rsa.pkcs8PEMRepresentation, rsa.publicKey.derRepresentation)
        } else {
            (publicKey, privateKeyPEM, spki) = (Certificate.PublicKey(key.publicKey), key.pemRepresentation, key.publicKey.derRepresentation)
        }
        let names = try hosts.map { host -> GeneralName in
            guard !host.isEmpty else { throw DuplexServerError.invalidTLSConfiguration("a certificate's host name is empty") }
            if let address = Self.addressBytes(host) { return .ipAddress(ASN1OctetString(contentBytes: address[...])) }
            return .dnsName(host)
        }
        let subject = try DistinguishedName {
            OrganizationName("Duplex")
            CommonName(commonName ?? hosts.first ?? "duplex")
        }
        let certificate = try Certificate(
            version: .v3,
            serialNumber: .init(),
            publicKey: publicKey,
            notValidBefore: notValidBefore ?? Date(timeIntervalSinceNow: -3600),
            notValidAfter: notValidAfter ?? Date(timeIntervalSinceNow: 30 * 86_400),
            issuer: issuer?.name ?? subject,
            subject: subject,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([usage == .server ? .serverAuth : .clientAuth])
                if !names.isEmpty { SubjectAlternativeNames(names) }
                if let issuer { AuthorityKeyIdentifier(keyIdentifier: issuer.keyIdentifier) }
            },
            issuerPrivateKey: .init(issuer?.key ?? key)
        )
        let pem = try certificate.serializeAsPEM().pemString
        return Issued(
            certificatePEM: pem,
            chainPEM: ([pem] + (issuer?.chainPEM ?? [])).joined(separator: "\n"),
            privateKeyPEM: privateKeyPEM,
            publicKeySHA256: Data(SHA256.hash(data: spki)).base64EncodedString()
        )
    }

    /// The bytes of an IPv4 or IPv6 address, or nil for a host name.
    static func addressBytes(_ host: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, host, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { Array($0) }
        }
        return nil
    }
}
