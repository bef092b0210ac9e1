import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing
import TestSupport

/// The real client against the real server (or a scripted peer) over loopback.
@Suite("WebSocket client over loopback")
struct WebSocketClientTests {
    static let wait: Duration = .seconds(10)

    struct Line: Codable, Equatable {
        var text: String
        var n: Int
    }

    @Test("sends and receives text, binary and JSON through /echo")
    func echo() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let socket = WebSocket(url: server.webSocketURL("/echo"))
                let messages = socket.messages
                try await socket.connect()
                try await socket.send("hello")
                try await socket.send(.data(Data([0, 1, 2, 255])))
                try await socket.sendJSON(Line(text: "hi", n: 3))
                try await socket.send(.text("text"))
                try await socket.send(.binary(Data("bin".utf8)))
                var received: [WebSocketMessage] = []
                for await message in messages {
                    received.append(message)
                    if received.count == 5 { break }
                }
                // A timeout ends the loop early: fail, never index past the end.
                try #require(received.count == 5)
                #expect(received[0] == .string("hello") && received[0].text == "hello")
                #expect(received[1] == .data(Data([0, 1, 2, 255])) && received[1].text == nil)
                #expect(try received[2].decode(Line.self) == Line(text: "hi", n: 3))
                #expect(received[3].text == "text")
                #expect(received[4].data == Data("bin".utf8))
                await socket.terminate()
            }
        }
    }

    @Test("states go notConnected, connecting, connected, disconnecting, disconnected; connect and disconnect twice do nothing")
    func statesAndIdempotence() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let socket = WebSocket(url: server.webSocketURL("/echo"))
                let states = socket.stateEvents
                let messages = socket.messages
                try await socket.connect()
                try await socket.connect()  // does nothing
                #expect(socket.state == .connected(protocol: nil))
                await socket.disconnect()
                await socket.disconnect()  // does nothing
                #expect(socket.state == .disconnected(.manuallyDisconnected))
                // the streams stay open, and connect works again
                try await socket.reconnect()
                try await socket.send("after reconnect")
                #expect(try await messages.first(within: Self.wait).text == "after reconnect")
                await socket.terminate()
                var seen: [WebSocketState] = []
                for await state in states { seen.append(state) }
                #expect(
                    seen == [
                        .notConnected, .connecting, .connected(protocol: nil), .disconnected(.manuallyDisconnected),
                        .connecting, .connected(protocol: nil), .disconnected(.terminated),
                    ])
            }
        }
    }

    @Test("terminate finishes every stream; send and connect then throw terminated; terminate twice does nothing")
    func terminate() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let socket = WebSocket(url: server.webSocketURL("/echo"))
                let events = socket.events
                let messages = socket.messages
                try await socket.connect()
                await socket.terminate()
                await socket.terminate()
                var sawConnected = false
                for await event in events { if case .connected = event { sawConnected = true } }
                for await _ in messages {}
                #expect(sawConnected)
                await #expect(throws: WebSocketError.self) { try await socket.send("x") }
                do {
                    try await socket.connect()
                    Issue.record("connect after terminate succeeded")
                } catch let error as WebSocketError {
                    #expect(error.code == .terminated)
                }
                #expect(socket.state == .disconnected(.terminated))
                for await _ in socket.events {}  // a stream asked for after terminate is already finished
            }
        }
    }

    @Test("send before connect throws notConnected")
    func sendWhenNotConnected() async throws {
        let socket = WebSocket(url: URL(string: "ws://127.0.0.1:9/echo")!)
        do {
            try await socket.send("nowhere")
            Issue.record("send succeeded")
        } catch let error as WebSocketError {
            #expect(error.code == .notConnected)
        }
    }

    @Test("releasing the last reference finishes the streams")
    func releaseFinishesStreams() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                var socket: WebSocket? = WebSocket(url: server.webSocketURL("/echo"))
                let events = socket!.events
                let states = socket!.stateEvents
                try await socket!.connect()
                socket = nil
                // both loops end only if releasing the socket finished its streams
                var seen: [WebSocketEvent] = []
                for await event in events { seen.append(event) }
                var lastState: WebSocketState?
                for await state in states { lastState = state }
                #expect(seen.first == .connected(protocol: nil))
                #expect(lastState == .disconnected(.terminated))
            }
        }
    }

    @Test("handshake failures are specific: rejected upgrade, refused connection, handshake timeout, bad URL")
    func connectionErrors() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let rejected = WebSocket(url: server.webSocketURL("/no-such-route"))
                await #expect { try await rejected.connect() } throws: { error in
                    let error = error as? WebSocketError
                    return error?.code == .upgradeRejected && error?.status == 400
                }
                var refusal = WebSocketError(.upgradeRejected, "the server answered the WebSocket handshake with HTTP 400", status: 400)
                refusal.body = #"{"error":"no WebSocket is served at this path"}"#
                #expect(rejected.state == .disconnected(.error(refusal)), "the refusal keeps what the server said")
            }
            let silent = try await SilentListener.start()
            let timeout = WebSocket(url: URL(string: "ws://127.0.0.1:\(silent.port)/")!, configuration: .init(connectTimeout: .milliseconds(200)))
            await #expect { try await timeout.connect() } throws: { ($0 as? WebSocketError)?.code == .connectTimeout }
            await silent.stop()
            let refused = WebSocket(url: URL(string: "ws://127.0.0.1:\(silent.port)/")!)
            await #expect { try await refused.connect() } throws: { ($0 as? WebSocketError)?.code == .connectionFailed }
            // A string URL never throws at init (seed code has no `try`): connect() reports it.
            let malformed = WebSocket(url: "ws://bad host/")
            await #expect { try await malformed.connect() } throws: {
                ($0 as? WebSocketError)?.code == .invalidURL && "\($0)".contains("ws://bad host/")
            }
            let noScheme = WebSocket(url: "http//missing-colon")
            await #expect { try await noScheme.connect() } throws: { ($0 as? WebSocketError)?.code == .invalidURL }
            let wrongScheme = WebSocket(url: URL(string: "ftp://127.0.0.1/")!)
            await #expect { try await wrongScheme.connect() } throws: { ($0 as? WebSocketError)?.code == .invalidURL }
        }
    }

    @Test("the negotiated subprotocol is exposed; one that was not offered fails the connection")
    func subprotocols() async throws {
        try await withTimeout {
            let peer = try await ScriptedPeer.start { n in ScriptedPeer.Behaviour(subprotocol: n == 1 ? "chat.v2" : "other") }
            defer { Task { await peer.stop() } }
            let request = WebSocketRequest(
                url: URL(string: "ws://127.0.0.1:\(peer.port)/")!, protocols: ["chat.v2", "chat.v1"], additionalHeaders: ["Authorization": "Bearer t"]
            )
            let socket = WebSocket(request: request)
            let events = socket.events
            try await socket.connect()
            #expect(socket.negotiatedProtocol == "chat.v2")
            #expect(try await events.first(within: Self.wait) == .connected(protocol: "chat.v2"))
            await socket.terminate()
            let second = WebSocket(request: request)
            await #expect { try await second.connect() } throws: { ($0 as? WebSocketError)?.code == .unexpectedSubprotocol }
        }
    }

    @Test("the close code and reason the server sends surface in events and state")
    func serverCloseCode() async throws {
        try await withTimeout {
            let peer = try await ScriptedPeer.start { _ in ScriptedPeer.Behaviour(closeOnConnect: (4001, "kicked")) }
            defer { Task { await peer.stop() } }
            let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(peer.port)/")!)
            let events = socket.events
            let states = socket.stateEvents
            try await socket.connect()
            let closed = try await events.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
            #expect(closed == .disconnected(code: WebSocketCloseCode(4001), reason: "kicked"))
            let state = try await states.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
            #expect(state == .disconnected(.closed(code: WebSocketCloseCode(4001), reason: "kicked")))
        }
    }

    @Test("ping failure is reported after exactly maxPingFailures unanswered pings, then the socket reconnects and measures round trips")
    func pingFailureThenReconnect() async throws {
        try await withTimeout {
            // the first connection ignores pings; later ones answer them
            let peer = try await ScriptedPeer.start { n in ScriptedPeer.Behaviour(answerPings: n > 1) }
            defer { Task { await peer.stop() } }
            let failures = NIOLockedValueBox<[WebSocketError]>([])
            let socket = WebSocket(
                url: URL(string: "ws://127.0.0.1:\(peer.port)/")!,
                configuration: .init(
                    ping: PingConfig(pingInterval: .milliseconds(400), maxPingFailures: 3, pongTimeout: .milliseconds(300)),
                    reconnection: .fixedDelay(.milliseconds(20))
                )
            )
            socket.onPingFailed = { error in failures.withLockedValue { $0.append(error) } }
            let states = socket.stateEvents
            let roundTrips = socket.pingRoundTrips
            try await socket.connect()
            let failed = try await states.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
            #expect(failed == .disconnected(.pingFailed(missedPings: 3)))
            // the last ping may still be on its way when the client gives up: wait for it
            await peer.waitForPings(3, onConnection: 1)
            #expect(peer.pingCount(onConnection: 1) == 3, "exactly maxPingFailures pings went out before the teardown")
            _ = try await states.first(within: Self.wait) { if case .connected = $0 { true } else { false } }
            // Reported once for the connection that failed. (Counted here: on a loaded machine
            // the new connection's pongs can be late for the 300 ms timeout too, and that would
            // be a failure of its own.)
            #expect(failures.withLockedValue { $0.count } == 1)
            #expect(peer.connectionCount == 2)
            let roundTrip = try await roundTrips.first(within: Self.wait)
            #expect(roundTrip > .zero && roundTrip < .seconds(1))
            #expect(socket.pingRoundTripTime != nil)
            await socket.terminate()
        }
    }

    @Test("after an abrupt drop the socket reconnects, and sends made meanwhile arrive in order, once")
    func reconnectAndQueuedSends() async throws {
        try await withTimeout {
            let peer = try await ScriptedPeer.start()
            defer { Task { await peer.stop() } }
            let socket = WebSocket(
                url: URL(string: "ws://127.0.0.1:\(peer.port)/")!,
                configuration: .init(reconnection: .fixedDelay(.milliseconds(200)))
            )
            let states = socket.stateEvents
            let events = socket.events
            try await socket.connect()
            try await socket.send("before")
            _ = try await events.first(within: Self.wait) { $0 == .message(.string("before")) }
            peer.dropAll()
            let dropped = try await states.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
            // a drop with no close frame reads as 1006, or as a reset connection
            switch dropped {
            case .disconnected(.closed(code: .abnormalClosure, reason: "")): break
            case .disconnected(.error(let error)) where error.code == .connectionLost: break
            default: Issue.record("unexpected state after a drop: \(dropped)")
            }
            for text in ["q1", "q2", "q3"] { try await socket.send(text) }
            _ = try await states.first(within: Self.wait) { if case .connected = $0 { true } else { false } }
            try await socket.send("after")
            // the echo of "after" arrives once everything before it was written
            _ = try await events.first(within: Self.wait) { $0 == .message(.string("after")) }
            #expect(peer.receivedTexts == ["before", "q1", "q2", "q3", "after"])
            #expect(peer.connectionCount == 2)
            await socket.terminate()
        }
    }

    @Test("a full send queue throws sendQueueFull instead of dropping")
    func sendQueueOverflow() async throws {
        try await withTimeout {
            let peer = try await ScriptedPeer.start { n in ScriptedPeer.Behaviour(dropOnConnect: n > 1) }
            let socket = WebSocket(
                url: URL(string: "ws://127.0.0.1:\(peer.port)/")!,
                configuration: .init(reconnection: .fixedDelay(.seconds(30)), maxQueuedSends: 2)
            )
            let states = socket.stateEvents
            try await socket.connect()
            peer.dropAll()
            _ = try await states.first(within: Self.wait) { if case .disconnected = $0 { true } else { false } }
            try await socket.send("1")
            try await socket.send("2")
            await #expect { try await socket.send("3") } throws: { ($0 as? WebSocketError)?.code == .sendQueueFull }
            #expect(socket.queuedSendCount == 2)
            await socket.terminate()
            await peer.stop()
        }
    }

    @Test("a close the client asks for is never reconnected")
    func noReconnectAfterDisconnect() async throws {
        try await withTimeout {
            let peer = try await ScriptedPeer.start()
            defer { Task { await peer.stop() } }
            let socket = WebSocket(
                url: URL(string: "ws://127.0.0.1:\(peer.port)/")!, configuration: .init(reconnection: .fixedDelay(.milliseconds(1))))
            try await socket.connect()
            await socket.disconnect(code: .goingAway, reason: "leaving")
            // the echo peer would accept a reconnection at once; prove none comes by making one
            // more connection of our own and seeing it is number 2
            let probe = WebSocket(url: URL(string: "ws://127.0.0.1:\(peer.port)/")!)
            try await probe.connect()
            #expect(peer.connectionCount == 2)
            #expect(socket.state == .disconnected(.manuallyDisconnected))
            await probe.terminate()
        }
    }
}

/// A TCP listener that accepts and never answers: a handshake that never completes.
final class SilentListener: Sendable {
    private let channel: any Channel
    let port: Int

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
    }

    static func start() async throws -> SilentListener {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0)
            .get()
        return SilentListener(channel: channel)
    }

    func stop() async {
        try? await channel.close()
    }
}

@Suite("WebSocket client against server faults")
struct WebSocketServerFaultTests {
    @Test("after the real server drops the connection, the client reconnects and echoes again; the close code the server sends surfaces")
    func reconnectAfterServerDrop() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: .init(reconnection: .fixedDelay(.milliseconds(20))))
                let states = socket.stateEvents
                let events = socket.events
                try await socket.connect()
                // one round trip: the server is now serving the connection, so the fault reaches it
                try await socket.send("warm")
                _ = try await events.first(within: .seconds(5)) { $0 == .message(.string("warm")) }
                #expect(server.server.dropConnections(.route("echo")) == 1)
                _ = try await states.first(within: .seconds(5)) { if case .disconnected = $0 { true } else { false } }
                _ = try await states.first(within: .seconds(5)) { if case .connected = $0 { true } else { false } }
                try await socket.send("back")
                _ = try await events.first(within: .seconds(5)) { $0 == .message(.string("back")) }
                #expect(server.server.closeConnections(.route("echo"), code: WebSocketCloseCode(4000), reason: "chaos") == 1)
                let closed = try await events.first(within: .seconds(5)) { if case .disconnected = $0 { true } else { false } }
                #expect(closed == .disconnected(code: WebSocketCloseCode(4000), reason: "chaos"))
                await socket.terminate()
            }
        }
    }
}
