import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

/// The app's own handshake on every connection (``WebSocket/preamble``), against the in-process
/// server's echo: it goes first, before the sends queued while reconnecting, and its failure is a
/// failed connection.
@Suite("WebSocket preamble")
struct PreambleTests {
    static let wait: Duration = .seconds(10)

    struct HandshakeRefused: Error {}

    @Test("the preamble goes first on every connection, before the sends queued while reconnecting; the reply it takes never reaches the streams")
    func preambleBeforeQueuedSends() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: .init(reconnection: .fixedDelay(.milliseconds(20))))
                let connections = NIOLockedValueBox(0)
                socket.preamble = { connection in
                    let n = connections.withLockedValue { count in
                        count += 1
                        return count
                    }
                    connection.send("hello \(n)")
                    let reply = try await connection.receive(timeout: .seconds(5))
                    guard reply.text == "hello \(n)" else { throw HandshakeRefused() }
                    connection.send("greeted \(n)")  // not taken by the preamble: the streams get its echo
                }
                let messages = socket.messages
                try await socket.connect()
                let states = socket.stateEvents  // from connected on: the next connecting is the reconnection
                var received: [String] = []
                var iterator = messages.makeAsyncIterator()
                received.append(await iterator.next()?.text ?? "")
                #expect(server.server.dropConnections(.route("echo")) == 1)
                _ = try await states.first(within: Self.wait) { $0 == .connecting }
                try await socket.send("queued")  // queued while reconnecting, or written once the preamble is done
                while received.count < 3, let message = await iterator.next() { received.append(message.text ?? "") }
                #expect(received == ["greeted 1", "greeted 2", "queued"], "the handshake, then what was queued; no \"hello\" reaches the streams")
                #expect(connections.withLockedValue { $0 } == 2)
                await socket.terminate()
            }
        }
    }

    @Test("a preamble that throws, or waits for a reply that does not come, fails the connection: connect() throws preambleFailed")
    func preambleFailure() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let refusing = WebSocket(url: server.webSocketURL("/echo"))
                refusing.preamble = { _ in throw HandshakeRefused() }
                let events = refusing.events
                let error = await #expect(throws: WebSocketError.self) { try await refusing.connect() }
                #expect(error?.code == .preambleFailed)
                #expect(error?.message.contains("HandshakeRefused") == true, "\(error?.message ?? "")")
                if case .connected = refusing.state { Issue.record("not connected: its preamble failed") }
                await refusing.terminate()
                for await event in events {
                    if case .connected = event { Issue.record("a connection whose preamble failed is never reported connected") }
                }

                let waiting = WebSocket(url: server.webSocketURL("/echo"))
                waiting.preamble = { connection in _ = try await connection.receive(timeout: .milliseconds(200)) }
                let silent = await #expect(throws: WebSocketError.self) { try await waiting.connect() }
                #expect(silent?.code == .preambleFailed)
                #expect(silent?.message.contains("no message within") == true, "\(silent?.message ?? "")")
                await waiting.terminate()
            }
        }
    }

    @Test("ReconnectingWebSocket: a failed preamble is a failed attempt, retried; connect() returns once one succeeds")
    func reconnectingRetriesPreamble() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let url = server.webSocketURL("/echo")
                let socket = ReconnectingWebSocket(connect: { WebSocket(url: url) }, strategy: .fixedDelay(.milliseconds(20)))
                let attempts = NIOLockedValueBox(0)
                socket.preamble = { connection in
                    let n = attempts.withLockedValue { count in
                        count += 1
                        return count
                    }
                    guard n >= 2 else { throw HandshakeRefused() }
                    connection.send("hello")
                }
                let messages = socket.messages
                try await socket.connect()
                #expect(attempts.withLockedValue { $0 } == 2)
                #expect(try await messages.first(within: Self.wait).text == "hello")
                await socket.terminate()
            }
        }
    }
}
