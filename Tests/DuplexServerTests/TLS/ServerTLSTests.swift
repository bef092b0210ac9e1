import Duplex
import DuplexSchema
@testable import DuplexHost
@testable import DuplexServer
import DuplexTesting
import Foundation
import TestSupport
import Testing

/// The server over TLS: its own made CA, client certificates, and the TLS fault listeners, each
/// met by the Duplex clients.
@Suite("Server over TLS")
struct ServerTLSTests {
    static func tlsConfiguration(_ tls: DuplexServerTLS) -> DuplexServerConfiguration {
        var configuration = DuplexServerConfiguration(port: 0, tickInterval: .milliseconds(20))
        configuration.tls = tls
        return configuration
    }

    @Test("--tls-self-signed in process: wss:// echo and an https:// SSE stream, trusting the CA the server made")
    func selfSigned() async throws {
        let tls = try DuplexServerTLS.selfSigned()
        let caPEM = try #require(tls.certificateAuthorityPEM)
        try await withTimeout {
            try await withDuplexServer(configuration: Self.tlsConfiguration(tls)) { server in
                #expect(server.webSocketURL("/echo").scheme == "wss")
                for host in ["localhost", "127.0.0.1"] {
                    let socket = WebSocket(
                        url: URL(string: "wss://\(host):\(server.port)/echo")!,
                        configuration: .init(tlsTrust: .certificateAuthority(pem: caPEM), compression: PerMessageDeflate(minimumBytes: 0))
                    )
                    let messages = socket.messages
                    try await socket.connect()
                    #expect(socket.negotiatedExtensions?.contains("permessage-deflate") == true, "compression over TLS as over TCP")
                    try await socket.send("over tls via \(host)")
                    #expect(try await messages.first(within: .seconds(10)).text == "over tls via \(host)")
                    await socket.terminate()
                }
                let events = ServerSentEventManager(
                    url: server.httpURL("/events?interval=20"),
                    configuration: SSEConfiguration(tlsTrust: .certificateAuthority(pem: caPEM))
                )
                let stream = events.events
                try await events.connect()
                let first = try await stream.first(within: .seconds(10))
                #expect(first.event == "tick")
                await events.disconnect()
            }
        }
    }

    @Test(
        "An HTTP/1.1 SSE stream over TLS ends on the server as soon as the client closes (its close_notify), not when the client's TLS close times out"
    )
    func sseEndsOnCloseNotify() async throws {
        let tls = try DuplexServerTLS.selfSigned()
        try await withDuplexServer(configuration: Self.tlsConfiguration(tls)) { server in
            var configuration = SSEConfiguration(tlsTrust: .certificateAuthority(pem: tls.certificateAuthorityPEM!))
            configuration.httpVersion = .http1
            let events = ServerSentEventManager(url: server.httpURL("/events?interval=20"), configuration: configuration)
            let stream = events.events
            try await events.connect()
            #expect(try await stream.first(within: .seconds(10)).event == "tick")
            #expect(server.server.connections.count == 1)
            // The client's close waits up to 5 s for the server's close_notify (NIOSSL's default);
            // before this was fixed the server wrote on to a half-closed connection until then.
            try await withTimeout(.seconds(3)) {
                await events.disconnect()
                await server.server.connections.waitUntilEmpty()
            }
        }
    }

    @Test("a plain ws:// client on the TLS port fails cleanly, and the server goes on serving")
    func plainClientOnTLSPort() async throws {
        let tls = try DuplexServerTLS.selfSigned()
        try await withTimeout {
            try await withDuplexServer(configuration: Self.tlsConfiguration(tls)) { server in
                let plain = WebSocket(url: URL(string: "ws://127.0.0.1:\(server.port)/echo")!, configuration: .init(connectTimeout: .seconds(5)))
                await #expect(throws: WebSocketError.self) { try await plain.connect() }
                let good = WebSocket(
                    url: server.webSocketURL("/echo"), configuration: .init(tlsTrust: .certificateAuthority(pem: tls.certificateAuthorityPEM!)))
                try await good.connect()
                await good.terminate()
            }
        }
    }

    @Test("each TLS fault fails for the client with its own cause; tls12-only connects; a client certificate passes client-certificate-required")
    func faults() async throws {
        var made = try DuplexServerTLS.selfSigned()
        made.faults = true
        let tls = made
        let authority = try #require(tls.certificateAuthority)
        let trust = TLSTrust.certificateAuthority(pem: authority.certificatePEM)
        let expected: [TLSFault: String] = [
            .expired: "certificate expired",
            .notYetValid: "certificate not yet valid",
            .wrongHost: "host-name mismatch",
            .selfSigned: "self-signed certificate",
            .untrustedRoot: "unknown CA",
            .incompleteChain: "unknown CA",
            .clientCertificateRequired: "certificate required",
            .weakKey: "weak key: the server's certificate has a 1024-bit RSA key",
        ]
        try await withTimeout(.seconds(60)) {
            try await withDuplexServer(configuration: Self.tlsConfiguration(tls)) { server in
                #expect(Set(server.server.tlsFaultPorts.keys) == Set(TLSFault.allCases))
                for (fault, cause) in expected {
                    let url = try #require(server.url(for: fault, "/echo", webSocket: true))
                    let socket = WebSocket(url: url, configuration: .init(connectTimeout: .seconds(10), tlsTrust: trust))
                    await #expect(Comment(rawValue: "\(fault)")) {
                        try await socket.connect()
                    } throws: { error in
                        guard let error = error as? WebSocketError, error.code == .tlsFailed else { return false }
                        return error.message.contains(cause)
                    }
                }
                // SSE connects as the WebSocket client does, and names the same causes.
                for (fault, cause) in expected {
                    let sse = ServerSentEventManager(
                        url: try #require(server.url(for: fault, "/events", webSocket: false)),
                        retryPolicy: .disabled,
                        configuration: SSEConfiguration(tlsTrust: trust)
                    )
                    await #expect(Comment(rawValue: "SSE \(fault)")) {
                        try await sse.connect()
                    } throws: { error in
                        guard let error = error as? SSEError, error.code == .tlsFailed else { return false }
                        return error.message.contains(cause)
                    }
                }
                // What should get through does.
                let tls12 = WebSocket(url: try #require(server.url(for: .tls12Only, "/echo", webSocket: true)), configuration: .init(tlsTrust: trust))
                try await tls12.connect()
                await tls12.terminate()
                let client = try authority.issue(commonName: "test client", hosts: [], usage: .client)
                var withIdentity = WebSocketConfiguration(tlsTrust: trust)
                withIdentity.tlsIdentity = .pem(certificateChain: client.chainPEM, privateKey: client.privateKeyPEM)
                let mutual = WebSocket(
                    url: try #require(server.url(for: .clientCertificateRequired, "/echo", webSocket: true)), configuration: withIdentity)
                let messages = mutual.messages
                try await mutual.connect()
                try await mutual.send("with a client certificate")
                #expect(try await messages.first(within: .seconds(10)).text == "with a client certificate")
                await mutual.terminate()
            }
        }
    }

    @Test("GET /tls-faults lists every fault's base URL; 404 on a server without them")
    func faultList() async throws {
        var made = try DuplexServerTLS.selfSigned()
        made.faults = true
        let tls = made
        try await withTimeout {
            try await withDuplexServer(configuration: Self.tlsConfiguration(tls)) { server in
                let (status, body) = try await HTTPProbe.get(server.httpURL("/tls-faults"), caPEM: tls.certificateAuthorityPEM!)
                #expect(status == 200)
                let listed = try JSONDecoder().decode([String: String].self, from: Data(body.utf8))
                #expect(Set(listed.keys) == Set(TLSFault.allCases.map(\.rawValue)))
                #expect(listed["expired"] == "https://127.0.0.1:\(server.server.tlsFaultPorts[.expired]!)")
            }
            try await withDuplexServer { server in
                let (status, body) = try await HTTPProbe.get(server.httpURL("/tls-faults"), caPEM: nil)
                #expect(status == 404)
                #expect(body.contains("--tls-faults"))
            }
        }
    }

    @Test("mutual TLS on the main listener: no certificate and a certificate from another CA are refused, one from the trusted CA is served")
    func mutualTLS() async throws {
        let clientAuthority = try DuplexCertificateAuthority(commonName: "clients")
        var made = try DuplexServerTLS.selfSigned()
        made.clientCertificateAuthorityPEM = clientAuthority.certificatePEM
        let tls = made
        let trust = TLSTrust.certificateAuthority(pem: tls.certificateAuthorityPEM!)
        try await withTimeout {
            try await withDuplexServer(configuration: Self.tlsConfiguration(tls)) { server in
                let none = WebSocket(url: server.webSocketURL("/echo"), configuration: .init(tlsTrust: trust))
                await #expect {
                    try await none.connect()
                } throws: { ($0 as? WebSocketError)?.message.contains("certificate required") == true }

                let stranger = try DuplexCertificateAuthority(commonName: "stranger").issue(hosts: [], usage: .client)
                var strangerConfiguration = WebSocketConfiguration(tlsTrust: trust)
                strangerConfiguration.tlsIdentity = .pem(certificateChain: stranger.chainPEM, privateKey: stranger.privateKeyPEM)
                let refused = WebSocket(url: server.webSocketURL("/echo"), configuration: strangerConfiguration)
                await #expect {
                    try await refused.connect()
                } throws: { ($0 as? WebSocketError)?.code == .tlsFailed }

                let member = try clientAuthority.issue(hosts: [], usage: .client)
                var memberConfiguration = WebSocketConfiguration(tlsTrust: trust)
                memberConfiguration.tlsIdentity = .pem(certificateChain: member.chainPEM, privateKey: member.privateKeyPEM)
                let accepted = WebSocket(url: server.webSocketURL("/echo"), configuration: memberConfiguration)
                try await accepted.connect()
                await accepted.terminate()
            }
        }
    }

    @Test("over TLS, the limits and faults work as over TCP: 431 for a large head, /_chaos/close and closeConnections reach a wss:// socket")
    func limitsAndFaults() async throws {
        var made = Self.tlsConfiguration(try .selfSigned())
        made.maxRequestHeadBytes = 2048
        made.chaos = true
        let configuration = made
        let caPEM = configuration.tls!.certificateAuthorityPEM!
        try await withTimeout {
            try await withDuplexServer(configuration: configuration) { server in
                let large = try await HTTPProbe.send(
                    port: server.port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: \(String(repeating: "p", count: 4096))\r\n\r\n",
                    caPEM: caPEM)
                #expect(large.hasPrefix("HTTP/1.1 431"), "\(large.prefix(200))")

                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: .init(tlsTrust: .certificateAuthority(pem: caPEM)))
                let events = socket.events
                try await socket.connect()
                let answer = try await HTTPProbe.send(
                    port: server.port,
                    "POST /_chaos/close?code=4000&reason=tls&route=echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    caPEM: caPEM)
                #expect(answer.contains(#"{"affected":1}"#), "\(answer)")
                let closed = try await events.first(within: .seconds(10)) { if case .disconnected = $0 { true } else { false } }
                #expect(closed == .disconnected(code: WebSocketCloseCode(4000), reason: "tls"))
                await socket.terminate()
            }
        }
    }

    @Test("bad TLS settings fail the start with a clear error")
    func badSettings() async throws {
        var faultsWithoutCA = try DuplexServerTLS.selfSigned()
        faultsWithoutCA.certificateAuthority = nil
        faultsWithoutCA.faults = true
        let other = try DuplexServerTLS.selfSigned()
        var mismatched = try DuplexServerTLS.selfSigned()
        mismatched.privateKeyPEM = other.privateKeyPEM
        let cases: [(DuplexServerTLS, String)] = [
            (faultsWithoutCA, "selfSigned"),
            (DuplexServerTLS(certificateChainPEM: "no pem here", privateKeyPEM: other.privateKeyPEM), "certificate chain PEM"),
            (DuplexServerTLS(certificateChainPEM: other.certificateChainPEM, privateKeyPEM: "no key"), "private key"),
            (mismatched, "cannot be used together"),
        ]
        for (tls, words) in cases {
            let server = DuplexServer(configuration: Self.tlsConfiguration(tls))
            await #expect(Comment(rawValue: words)) {
                try await withTimeout { try await server.run() }
            } throws: { error in
                String(describing: error).contains(words)
            }
        }
        #expect(throws: DuplexServerError.self) {
            try DuplexServerTLS(certificateChainFile: "/nonexistent/cert.pem", privateKeyFile: "/nonexistent/key.pem")
        }
    }
}
