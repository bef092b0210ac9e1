import Duplex
import DuplexTesting
import Testing

@Test func myClientRefusesAnExpiredCertificate() async throws {
    var configuration = DuplexServerConfiguration()
    var tls = try DuplexServerTLS.selfSigned()
    tls.faults = true
    configuration.tls = tls
    try await withDuplexServer(configuration: configuration) { server in
        let trust = TLSTrust.certificateAuthority(pem: tls.certificateAuthorityPEM!)
        let expired = WebSocket(
            url: server.url(for: .expired, "/echo", webSocket: true)!,
            configuration: .init(tlsTrust: trust)
        )
        let error = await #expect(throws: WebSocketError.self) { try await expired.connect() }
        #expect(error?.code == .tlsFailed)  // "certificate expired: …"
        await expired.terminate()
    }
}
