import Duplex
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import NIOSSL
import Testing

/// Public-key pinning: in addition to the chain and host-name checks, checked before any byte
/// of the request is sent.
@Suite("TLS public-key pinning")
struct PinningTests {
    /// A server certificate from a made CA, and a TLS context that presents it.
    static func server() throws -> (authority: DuplexCertificateAuthority, issued: DuplexCertificateAuthority.Issued, context: NIOSSLContext) {
        let authority = try DuplexCertificateAuthority()
        let issued = try authority.issue(hosts: ["localhost", "127.0.0.1"])
        let configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(issued.chainPEM.utf8)).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(issued.privateKeyPEM.utf8), format: .pem))
        )
        return (authority, issued, try NIOSSLContext(configuration: configuration))
    }

    @Test("the right pin connects; a wrong pin fails with pin mismatch before the request is sent")
    func pins() async throws {
        let (authority, issued, context) = try Self.server()
        let requests = NIOLockedValueBox(0)
        let peer = try await RawHTTPPeer.start(tls: context) { _ in
            requests.withLockedValue { $0 += 1 }
            return "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"
        }
        defer { Task { await peer.stop() } }
        let url = URL(string: "wss://127.0.0.1:\(peer.port)/echo")!
        let trust = TLSTrust.certificateAuthority(pem: authority.certificatePEM)
        let other = try DuplexCertificateAuthority().issue(hosts: ["localhost"]).publicKeySHA256
        try await withTimeout {
            let wrong = WebSocket(url: url, configuration: .init(tlsTrust: trust.pinning(publicKeySHA256: ["sha256//\(other)"])))
            await #expect {
                try await wrong.connect()
            } throws: { error in
                guard let error = error as? WebSocketError, error.code == .tlsFailed else { return false }
                return error.message.contains("pin mismatch") && error.message.contains(issued.publicKeySHA256)
            }
            // Pinned right (one of two, curl's ;-separated spelling): the request goes out, and
            // the peer answers it (404: the handshake is refused, after TLS).
            let right = WebSocket(
                url: url, configuration: .init(tlsTrust: trust.pinning(publicKeySHA256: ["sha256//\(other);sha256//\(issued.publicKeySHA256)"])))
            await #expect {
                try await right.connect()
            } throws: { ($0 as? WebSocketError)?.code == .upgradeRejected }
            #expect(requests.withLockedValue { $0 } == 1, "only the rightly pinned connection sent its request")
            // SSE checks pins on the same path: a wrong pin sends nothing, the right one sends its
            // request (and the peer's 404 fails the stream).
            let sseURL = URL(string: "https://127.0.0.1:\(peer.port)/events")!
            let wrongSSE = ServerSentEventManager(
                url: sseURL, retryPolicy: .disabled, configuration: SSEConfiguration(tlsTrust: trust.pinning(publicKeySHA256: [other])))
            await #expect {
                try await wrongSSE.connect()
            } throws: { error in
                guard let error = error as? SSEError, error.code == .tlsFailed else { return false }
                return error.message.contains("pin mismatch") && error.message.contains(issued.publicKeySHA256)
            }
            let rightSSE = ServerSentEventManager(
                url: sseURL, retryPolicy: .disabled,
                configuration: SSEConfiguration(tlsTrust: trust.pinning(publicKeySHA256: [issued.publicKeySHA256])))
            await #expect {
                try await rightSSE.connect()
            } throws: { ($0 as? SSEError)?.status == 404 }
            #expect(requests.withLockedValue { $0 } == 2, "only the rightly pinned SSE stream sent its request")
        }
    }

    @Test(
        "a pin never replaces verification: an untrusted chain fails even with its key pinned; pins with the insecure trust and bad pins are refused; over SSE too"
    )
    func pinsAddToVerification() async throws {
        let (_, issued, context) = try Self.server()
        let peer = try await RawHTTPPeer.start(tls: context) { _ in "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n" }
        defer { Task { await peer.stop() } }
        let url = URL(string: "wss://127.0.0.1:\(peer.port)/echo")!
        try await withTimeout {
            let untrusted = WebSocket(
                url: url, configuration: .init(tlsTrust: TLSTrust.systemRoots.pinning(publicKeySHA256: [issued.publicKeySHA256])))
            await #expect {
                try await untrusted.connect()
            } throws: { ($0 as? WebSocketError)?.message.contains("unknown CA") == true }
            let insecure = WebSocket(
                url: url, configuration: .init(tlsTrust: TLSTrust.insecureAcceptAnyCertificate.pinning(publicKeySHA256: [issued.publicKeySHA256])))
            await #expect {
                try await insecure.connect()
            } throws: { ($0 as? WebSocketError)?.message.contains("insecureAcceptAnyCertificate") == true }
            let malformed = WebSocket(
                url: url, configuration: .init(tlsTrust: TLSTrust.systemRoots.pinning(publicKeySHA256: ["sha256//not-a-digest"])))
            await #expect {
                try await malformed.connect()
            } throws: { ($0 as? WebSocketError)?.message.contains("not a base64 SHA-256") == true }
            let sse = ServerSentEventManager(
                url: URL(string: "https://127.0.0.1:\(peer.port)/events")!,
                retryPolicy: .disabled,
                configuration: SSEConfiguration(tlsTrust: TLSTrust.systemRoots.pinning(publicKeySHA256: [issued.publicKeySHA256]))
            )
            await #expect {
                try await sse.connect()
            } throws: { error in
                guard let error = error as? SSEError, error.code == .tlsFailed else { return false }
                return error.message.contains("unknown CA")
            }
        }
    }
}
