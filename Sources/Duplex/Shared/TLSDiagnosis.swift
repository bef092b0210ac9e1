import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import NIOTLS

/// Says why a TLS handshake failed in words a user acts on: the certificate expired or is not
/// valid yet, is self-signed, was issued by a CA that is not trusted (or the server left out an
/// intermediate), is for another host, the server requires a client certificate, or no TLS
/// version is shared. BoringSSL decides; this only names what it refused, reading the peer's
/// certificate when the handshake got that far.
enum TLSDiagnosis {
    /// The cause of `error`, or nil when it is not a TLS failure.
    static func cause(of error: any Error, peer: NIOSSLCertificate?, now: Date = Date()) -> String? {
        switch error {
        case let error as NIOSSLExtraError where error == .failedToValidateHostname:
            // The names come from the peer: only host-name characters are shown, and few of them.
            let names = peer.map { certificate in
                certificate._subjectAlternativeNames().compactMap { name -> String? in
                    guard name.nameType == .dnsName else { return nil }
                    let text = String(decoding: name.contents.prefix(253), as: UTF8.self)
                    return String(
                        text.unicodeScalars.filter { $0.isASCII && (CharacterSet.alphanumerics.contains($0) || "-.*_".unicodeScalars.contains($0)) }
                            .map(Character.init))
                }.prefix(5)
            }
            let shown = names.map { $0.isEmpty ? "" : " (its DNS names: \($0.joined(separator: ", ")))" } ?? ""
            return "host-name mismatch: the server's certificate is not for this host\(shown)"
        case is NIOSSLExtraError, is NIOSSLError, is BoringSSLError:
            let text = String(describing: error)
            if text.contains("CERTIFICATE_REQUIRED") {
                return "certificate required: the server asks for a client certificate and none it accepts was given"
            }
            if text.contains("PROTOCOL_VERSION") || text.contains("UNSUPPORTED_PROTOCOL") {
                return "no TLS version in common with the server"
            }
            if text.contains("CERTIFICATE_VERIFY_FAILED") {
                return verificationCause(peer: peer, now: now)
            }
            if text.contains("BAD_CERTIFICATE") || text.contains("UNKNOWN_CA") || text.contains("CERTIFICATE_UNKNOWN") {
                return "the server refused the client certificate (bad certificate, or issued by a CA it does not trust)"
            }
            return "handshake failed: \(text)"
        default:
            return nil
        }
    }

    private static func verificationCause(peer: NIOSSLCertificate?, now: Date) -> String {
        guard let peer else { return "the server's certificate could not be verified" }
        let formatter = ISO8601DateFormatter()
        let notAfter = Date(timeIntervalSince1970: TimeInterval(peer.notValidAfter))
        let notBefore = Date(timeIntervalSince1970: TimeInterval(peer.notValidBefore))
        if now > notAfter { return "certificate expired: the server's certificate was valid until \(formatter.string(from: notAfter))" }
        if now < notBefore { return "certificate not yet valid: the server's certificate is valid from \(formatter.string(from: notBefore))" }
        if let der = try? peer.toDERBytes(), DERCertificateNames.isSelfIssued(der) {
            return "self-signed certificate: the server's certificate is signed by its own key, by no CA you trust"
        }
        return "unknown CA: the server's certificate was not issued by a CA you trust, or the server left out an intermediate certificate"
    }
}

/// Just enough DER to compare a certificate's issuer and subject names.
enum DERCertificateNames {
    /// Whether the certificate's issuer and subject are the same name (a self-issued certificate).
    static func isSelfIssued(_ der: [UInt8]) -> Bool {
        // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version?, serial, signature,
        // issuer, validity, subject, ... } ... }
        guard let certificate = element(der, at: 0), der[certificate.start - certificate.headerLength] == 0x30,
            let tbs = element(der, at: certificate.start), der[tbs.start - tbs.headerLength] == 0x30
        else { return false }
        var offset = tbs.start
        var fields: [Range<Int>] = []
        while offset < tbs.end, fields.count < 6, let field = element(der, at: offset) {
            let tag = der[offset]
            if fields.isEmpty, tag == 0xA0 {
                offset = field.end  // the version
                continue
            }
            fields.append(offset..<field.end)
            offset = field.end
        }
        // serial, signature, issuer, validity, subject
        guard fields.count >= 5 else { return false }
        return der[fields[2]] == der[fields[4]]
    }

    /// The size in bits of an RSA key's modulus, from its SubjectPublicKeyInfo; nil for another
    /// kind of key or DER that does not parse.
    static func rsaModulusBits(spki der: [UInt8]) -> Int? {
        let rsaEncryption: [UInt8] = [0x06, 0x09, 0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01]
        // SubjectPublicKeyInfo ::= SEQUENCE { algorithm SEQUENCE { OID, NULL }, BIT STRING }
        guard der.first == 0x30, let info = element(der, at: 0),
            der.count > info.start, der[info.start] == 0x30, let algorithm = element(der, at: info.start),
            der[algorithm.start..<algorithm.end].starts(with: rsaEncryption),
            algorithm.end < der.count, der[algorithm.end] == 0x03, let bits = element(der, at: algorithm.end),
            // the unused-bits byte, then RSAPublicKey ::= SEQUENCE { modulus INTEGER, exponent INTEGER }
            bits.start + 1 < der.count, der[bits.start + 1] == 0x30, let key = element(der, at: bits.start + 1),
            key.start < der.count, der[key.start] == 0x02, let modulus = element(der, at: key.start)
        else { return nil }
        var bytes = der[modulus.start..<modulus.end].drop { $0 == 0 }
        guard let first = bytes.popFirst() else { return 0 }
        return bytes.count * 8 + (8 - first.leadingZeroBitCount)
    }

    /// The element whose tag is at `offset`: where its contents start and end.
    private static func element(_ der: [UInt8], at offset: Int) -> (start: Int, end: Int, headerLength: Int)? {
        guard offset + 1 < der.count else { return nil }
        var index = offset + 1
        let first = der[index]
        index += 1
        var length = 0
        if first < 0x80 {
            length = Int(first)
        } else {
            let count = Int(first & 0x7F)
            guard count >= 1, count <= 4, index + count <= der.count else { return nil }
            for byte in der[index..<(index + count)] { length = length << 8 | Int(byte) }
            index += count
        }
        guard index + length <= der.count else { return nil }
        return (index, index + length, index - offset)
    }
}

/// Holds a `wss://` connection until TLS is established: then refuses an RSA key under 2,048
/// bits, checks the server's public key against the pins, if any (after NIOSSL verified the chain and host name: pins add to that,
/// never replace it), and lets the HTTP request go. When the handshake fails, it keeps the
/// certificate the server presented, so that the error can say what was wrong with it.
final class TLSGate: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = NIOAny

    private let pins: Set<String>
    private let state = NIOLockedValueBox<(peer: NIOSSLCertificate?, promise: EventLoopPromise<Void>?, negotiated: String?)>((nil, nil, nil))

    init(pins: Set<String>) {
        self.pins = pins
    }

    /// The certificate of a server whose handshake failed, when it got that far.
    var peer: NIOSSLCertificate? { state.withLockedValue { $0.peer } }

    /// The application protocol ALPN chose (`h2`, `http/1.1`), once TLS is established; nil
    /// when the client offered none or the server chose none.
    var negotiatedProtocol: String? { state.withLockedValue { $0.negotiated } }

    /// Succeeds once TLS is established and the pins hold; fails with the handshake's error.
    func established(on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        let promise = eventLoop.makePromise(of: Void.self)
        state.withLockedValue { $0.promise = promise }
        return promise.futureResult
    }

    private func finish(_ result: Result<Void, any Error>) {
        let promise = state.withLockedValue { state in
            defer { state.promise = nil }
            return state.promise
        }
        promise?.completeWith(result)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard let tlsEvent = event as? TLSUserEvent, case .handshakeCompleted(let negotiated) = tlsEvent else {
            return context.fireUserInboundEventTriggered(event)
        }
        state.withLockedValue { $0.negotiated = negotiated }
        let certificate = try? context.pipeline.syncOperations.handler(type: NIOSSLClientHandler.self).peerCertificate
        // BoringSSL takes any RSA key size; OpenSSL's default security level, browsers and
        // NIST (since 2013) refuse less than 2,048 bits.
        if let spki = try? certificate?.extractPublicKey().toSPKIBytes(), let bits = DERCertificateNames.rsaModulusBits(spki: spki), bits < 2048 {
            finish(
                .failure(WebSocketError(.tlsFailed, "weak key: the server's certificate has a \(bits)-bit RSA key; at least 2048 bits are required")))
            context.close(promise: nil)
            return
        }
        if !pins.isEmpty {
            let actual = certificate.flatMap { try? PublicKeyPin.sha256($0) }
            guard let actual, pins.contains(actual) else {
                let shown = actual.map { "sha256//\($0)" } ?? "unreadable"
                finish(.failure(WebSocketError(.tlsFailed, "pin mismatch: the server's public key (\(shown)) is none of the pinned keys")))
                context.close(promise: nil)
                return
            }
        }
        context.fireUserInboundEventTriggered(event)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        finish(.success(()))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let handler = try? context.pipeline.syncOperations.handler(type: NIOSSLClientHandler.self) {
            let certificate = handler.peerCertificate
            state.withLockedValue { $0.peer = certificate }
        }
        finish(.failure(error))
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish(.failure(ChannelError.eof))
        context.fireChannelInactive()
    }
}

/// The SHA-256 of a certificate's SubjectPublicKeyInfo, base64: what a pin names (curl's
/// `--pinnedpubkey sha256//…`, HPKP's pin-sha256).
enum PublicKeyPin {
    static func sha256(_ certificate: NIOSSLCertificate) throws -> String {
        let spki = try certificate.extractPublicKey().toSPKIBytes()
        return Data(SHA256.hash(data: spki)).base64EncodedString()
    }
}
