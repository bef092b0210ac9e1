@testable import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import TestSupport
import Testing

/// WebSocket and SSE through real proxies started by the tests: tinyproxy (HTTP CONNECT, with
/// and without basic authentication, and refusing) and dante (SOCKS5), over plain TCP and TLS.
@Suite("Proxies", .enabled(if: ProxyPeer.available, "tinyproxy and dante-server are not installed"))
struct ProxyTests {
    /// Echoes one message through `socket`.
    static func echo(_ socket: WebSocket, _ text: String) async throws -> String? {
        let messages = socket.messages
        try await socket.connect()
        try await socket.send(text)
        let reply = try await messages.first(within: .seconds(10)).text
        await socket.terminate()
        return reply
    }

    /// Two servers for the body: one on plain TCP, one over TLS with the CA PEM that trusts it.
    static func withServers(_ body: (RunningDuplexServer, RunningDuplexServer, String) async throws -> Void) async throws {
        var made = DuplexServerConfiguration(port: 0, tickInterval: .milliseconds(20))
        made.tls = try .selfSigned()
        let tls = made
        try await withDuplexServer(configuration: .init(port: 0, tickInterval: .milliseconds(20))) { plain in
            try await withDuplexServer(configuration: tls) { secure in
                try await body(plain, secure, tls.tls!.certificateAuthorityPEM!)
            }
        }
    }

    /// One event through an SSE manager.
    static func firstEvent(_ url: URL, _ configuration: SSEConfiguration) async throws -> String? {
        let manager = ServerSentEventManager(url: url, retryPolicy: .disabled, configuration: configuration)
        let events = manager.events
        try await manager.connect()
        let event = try await events.first(within: .seconds(10))
        await manager.disconnect()
        return event.event
    }

    @Test("through tinyproxy (CONNECT): ws://, wss:// and SSE over http:// and https://, each seen in the proxy's log")
    func httpProxy() async throws {
        let proxy = try await ProxyPeer.http()
        defer { proxy.stop() }
        try await withTimeout(.seconds(60)) {
            try await Self.withServers { plain, secure, caPEM in
                var webSocket = WebSocketConfiguration(tlsTrust: .certificateAuthority(pem: caPEM))
                webSocket.proxy = .http(host: "127.0.0.1", port: proxy.port)
                #expect(try await Self.echo(WebSocket(url: plain.webSocketURL("/echo"), configuration: webSocket), "plain") == "plain")
                try await proxy.waitForLog("Established connection to host \"127.0.0.1\"")
                #expect(try await Self.echo(WebSocket(url: secure.webSocketURL("/echo"), configuration: webSocket), "secure") == "secure")
                var sse = SSEConfiguration(tlsTrust: .certificateAuthority(pem: caPEM))
                sse.proxy = .http(host: "127.0.0.1", port: proxy.port)
                #expect(try await Self.firstEvent(plain.httpURL("/events?interval=20"), sse) == "tick")
                #expect(try await Self.firstEvent(secure.httpURL("/events?interval=20"), sse) == "tick")
                // A POST stream's body goes through the tunnel too.
                let peer = try await ScriptedHTTPPeer.start { _ in .init(chunks: ["data: [DONE]\n\n"]) }
                defer { Task { await peer.stop() } }
                let post = ServerSentEventManager(
                    request: SSERequest(
                        url: URL(string: "http://127.0.0.1:\(peer.port)/v1")!, method: .post, body: Data("through".utf8), terminalEvent: .done),
                    retryPolicy: .disabled,
                    configuration: sse
                )
                let events = post.events
                try await post.connect()
                // The stream ends after its terminal event: then, and not at the event, it has finished.
                var received: [String] = []
                for await event in events { received.append(event.data) }
                #expect(received == ["[DONE]"])
                #expect(post.hasFinished)
                #expect(peer.received.map(\.body) == ["through"])
                let log = proxy.log
                for port in [plain.port, secure.port, peer.port] {
                    #expect(
                        log.contains("127.0.0.1:\(port)") || log.contains("port \(port)") || log.contains(":\(port)"),
                        "the proxy opened connections to \(port): \(log)")
                }
            }
        }
    }

    @Test("a proxy that asks for a password: none gets 407, a wrong one is refused, the right one from the URL gets through; for SSE too")
    func authentication() async throws {
        let proxy = try await ProxyPeer.http(basicAuth: ("alice", "s3cret"))
        defer { proxy.stop() }
        try await withTimeout(.seconds(60)) {
            try await withDuplexServer(configuration: .init(port: 0, tickInterval: .milliseconds(20))) { server in
                func configuration(_ url: String) throws -> WebSocketConfiguration {
                    var configuration = WebSocketConfiguration(connectTimeout: .seconds(10))
                    configuration.proxy = try Proxy(url: url)
                    return configuration
                }
                let none = WebSocket(url: server.webSocketURL("/echo"), configuration: try configuration("http://127.0.0.1:\(proxy.port)"))
                await #expect {
                    try await none.connect()
                } throws: { error in
                    guard let error = error as? WebSocketError else { return false }
                    return error.code == .proxyFailed && error.status == 407 && error.message.contains("requires authentication")
                }
                let wrong = WebSocket(
                    url: server.webSocketURL("/echo"), configuration: try configuration("http://alice:nope@127.0.0.1:\(proxy.port)"))
                await #expect {
                    try await wrong.connect()
                } throws: { error in
                    guard let error = error as? WebSocketError else { return false }
                    return error.code == .proxyFailed && error.message.contains("refused the user and password")
                }
                let right = WebSocket(
                    url: server.webSocketURL("/echo"), configuration: try configuration("http://alice:s3cret@127.0.0.1:\(proxy.port)"))
                #expect(try await Self.echo(right, "authenticated") == "authenticated")
                // SSE goes through the same tunnel code, and says the same.
                var sse = SSEConfiguration()
                sse.proxy = .http(host: "127.0.0.1", port: proxy.port)
                await #expect {
                    _ = try await Self.firstEvent(server.httpURL("/events?interval=20"), sse)
                } throws: { error in
                    guard let error = error as? SSEError else { return false }
                    return error.code == .proxyFailed && error.status == 407 && error.message.contains("requires authentication")
                }
                sse.proxy = .http(host: "127.0.0.1", port: proxy.port, username: "alice", password: "nope")
                await #expect {
                    _ = try await Self.firstEvent(server.httpURL("/events?interval=20"), sse)
                } throws: { ($0 as? SSEError)?.message.contains("refused the user and password") == true }
                sse.proxy = .http(host: "127.0.0.1", port: proxy.port, username: "alice", password: "s3cret")
                #expect(try await Self.firstEvent(server.httpURL("/events?interval=20"), sse) == "tick")
            }
        }
    }

    @Test("a proxy that refuses the port (403) or is not there: proxyFailed with what it said, for WebSocket and SSE")
    func refusals() async throws {
        let proxy = try await ProxyPeer.http(onlyPort443: true)
        defer { proxy.stop() }
        try await withTimeout(.seconds(60)) {
            try await withDuplexServer { server in
                var configuration = WebSocketConfiguration(connectTimeout: .seconds(10))
                configuration.proxy = .http(host: "127.0.0.1", port: proxy.port)
                let refused = WebSocket(url: server.webSocketURL("/echo"), configuration: configuration)
                await #expect {
                    try await refused.connect()
                } throws: { error in
                    guard let error = error as? WebSocketError else { return false }
                    return error.code == .proxyFailed && error.status == 403 && error.message.contains("refused the tunnel")
                }
                var sse = SSEConfiguration()
                sse.proxy = configuration.proxy
                await #expect {
                    _ = try await Self.firstEvent(server.httpURL("/events?interval=20"), sse)
                } throws: { error in
                    guard let error = error as? SSEError else { return false }
                    return error.code == .proxyFailed && error.status == 403 && error.message.contains("refused the tunnel")
                }
                let refusing = try RefusingPort()
                let port = refusing.port
                configuration.proxy = .socks5(host: "127.0.0.1", port: port)
                let absent = WebSocket(url: server.webSocketURL("/echo"), configuration: configuration)
                await #expect {
                    try await absent.connect()
                } throws: { error in
                    guard let error = error as? WebSocketError else { return false }
                    return error.code == .proxyFailed && error.message.contains("could not connect to the proxy 127.0.0.1:\(port)")
                }
            }
        }
    }

    @Test("through dante (SOCKS5): ws://, wss:// and SSE; a target that refuses is named with the SOCKS reply")
    func socks5() async throws {
        let proxy = try await ProxyPeer.socks5()
        defer { proxy.stop() }
        try await withTimeout(.seconds(60)) {
            try await Self.withServers { plain, secure, caPEM in
                var webSocket = WebSocketConfiguration(tlsTrust: .certificateAuthority(pem: caPEM))
                webSocket.proxy = try Proxy(url: "socks5://127.0.0.1:\(proxy.port)")
                #expect(try await Self.echo(WebSocket(url: plain.webSocketURL("/echo"), configuration: webSocket), "plain") == "plain")
                try await proxy.waitForLog("\(plain.port)")
                // By name: the proxy resolves it.
                #expect(
                    try await Self.echo(WebSocket(url: URL(string: "wss://localhost:\(secure.port)/echo")!, configuration: webSocket), "secure")
                        == "secure")
                var sse = SSEConfiguration(tlsTrust: .certificateAuthority(pem: caPEM))
                sse.proxy = .socks5(host: "127.0.0.1", port: proxy.port)
                #expect(try await Self.firstEvent(secure.httpURL("/events?interval=20"), sse) == "tick")
                try await proxy.waitForLog("\(secure.port)")

                let closed = try RefusingPort()
                let refused = WebSocket(url: URL(string: "ws://127.0.0.1:\(closed.port)/echo")!, configuration: webSocket)
                await #expect {
                    try await refused.connect()
                } throws: { error in
                    guard let error = error as? WebSocketError else { return false }
                    return error.code == .proxyFailed && error.message.contains("SOCKS5 reply")
                }
            }
        }
    }
}

/// The environment's proxy variables, read as curl reads them.
@Suite("Proxy.environment")
struct ProxyEnvironmentTests {
    @Test("https_proxy for secure URLs, http_proxy for plain ones, all_proxy otherwise; lower case first")
    func variables() throws {
        let environment = [
            "https_proxy": "http://secure.proxy:3128", "HTTPS_PROXY": "http://ignored:1",
            "HTTP_PROXY": "socks5://plain.proxy",
        ]
        #expect(
            try Proxy.environment.route(secure: true, host: "example.com", environment: environment)
                == .http(host: "secure.proxy", port: 3128, username: nil, password: nil))
        #expect(try Proxy.environment.route(secure: false, host: "example.com", environment: environment) == .socks5(host: "plain.proxy", port: 1080))
        #expect(
            try Proxy.environment.route(secure: true, host: "example.com", environment: ["ALL_PROXY": "user:pw@all.proxy:8"])
                == .http(host: "all.proxy", port: 8, username: "user", password: "pw"))
        #expect(try Proxy.environment.route(secure: true, host: "example.com", environment: [:]) == nil)
        #expect(throws: WebSocketError.self) {
            try Proxy.environment.route(secure: true, host: "example.com", environment: ["https_proxy": "https://tls.proxy"])
        }
    }

    @Test("no_proxy: names and their subdomains, a leading dot, ports ignored, IPv6 in brackets, * for all")
    func noProxy() {
        let list = "localhost, .internal.example,10.0.0.1:8080,[::1],other"
        for host in ["localhost", "a.internal.example", "internal.example", "10.0.0.1", "::1", "OTHER"] {
            #expect(Proxy.bypasses(host: host, noProxy: list), "\(host)")
        }
        for host in ["example.com", "notother", "localhost.evil.com", "10.0.0.2"] {
            #expect(!Proxy.bypasses(host: host, noProxy: list), "\(host)")
        }
        #expect(Proxy.bypasses(host: "anything", noProxy: "*"))
    }

    @Test("a proxy URL with another scheme, no host, a SOCKS password or a bad port is refused with a reason")
    func badURLs() {
        for url in ["https://proxy:443", "ftp://proxy", "http://:80", "socks5://u:p@proxy", "http://proxy:99999"] {
            #expect(throws: WebSocketError.self, "\(url)") { try Proxy(url: url) }
        }
    }
}
