import Duplex
import DuplexTesting
import Foundation
import Testing
import TestSupport

/// wss:// against a TLS peer whose certificate the test generates with the openssl CLI.
@Suite("WebSocket over TLS")
struct WebSocketTLSTests {
    @Test("wss with the self-signed certificate trusted as a CA works, by host name and by IP")
    func trustedCertificate() async throws {
        let certificate = try await TestCertificate.make()
        try await withTimeout {
            let peer = try await ScriptedPeer.start(tls: certificate.serverContext)
            defer { Task { await peer.stop() } }
            for host in ["localhost", "127.0.0.1"] {
                let socket = WebSocket(
                    url: URL(string: "wss://\(host):\(peer.port)/")!,
                    configuration: .init(tlsTrust: .certificateAuthority(pem: certificate.certificatePEM))
                )
                let messages = socket.messages
                try await socket.connect()
                try await socket.send("over tls")
                #expect(try await messages.first(within: .seconds(10)).text == "over tls", "\(host)")
                await socket.terminate()
            }
        }
    }

    @Test("an untrusted certificate fails with tlsFailed; the insecure opt-in accepts it")
    func untrustedCertificate() async throws {
        let certificate = try await TestCertificate.make()
        try await withTimeout {
            let peer = try await ScriptedPeer.start(tls: certificate.serverContext)
            defer { Task { await peer.stop() } }
            let url = URL(string: "wss://localhost:\(peer.port)/")!
            let strict = WebSocket(url: url)
            await #expect { try await strict.connect() } throws: { ($0 as? WebSocketError)?.code == .tlsFailed }
            let insecure = WebSocket(url: url, configuration: .init(tlsTrust: .insecureAcceptAnyCertificate))
            try await insecure.connect()
            #expect(insecure.state == .connected(protocol: nil))
            await insecure.terminate()
        }
    }

    @Test("a CA PEM with no certificate is a clear error")
    func badCertificateAuthority() async throws {
        let socket = WebSocket(url: URL(string: "wss://localhost:1/")!, configuration: .init(tlsTrust: .certificateAuthority(pem: "not a pem")))
        await #expect { try await socket.connect() } throws: { ($0 as? WebSocketError)?.code == .tlsFailed }
    }
}
