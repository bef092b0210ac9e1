// Seed 004 (Live Communication: SSE and WebSocket), its examples as written, with `import Duplex`.
// Edits, each needed for Swift to compile the seed's text at all, whatever the library:
// - case bodies that hold only a comment get `break` (Swift requires a statement);
// - the `WebSocketRequest` example's two missing commas are added;
// - `url:_` placeholders and the `congif` typo are filled in; `sut` is the socket.
// Everything else is the seed's own text. Lines the seed writes with a spelling Duplex keeps
// only as a fix-it (`additionalheaders:`, `.authentication`) compile with a deprecation warning
// that names the replacement.
#if canImport(Combine)
import Combine
#else
import OpenCombine
#endif
import Duplex
import DuplexCallbacks
import DuplexCombine
import DuplexSchema
import DuplexTesting
import Foundation
import Testing

enum Seed004 {
    // MARK: Server-Sent Events

    static func initialize() {
        let sse = ServerSentEventManager(url: "https://example.com/events")
        _ = sse
    }

    static func initializeWithRequest() {
        let request = SSERequest(
            url: "https://example.com/events",
            additionalheaders: [
                .authorization(.bearer("YOUR_TOKEN"))
            ]
        )
        let sse = ServerSentEventManager(request: request)
        _ = sse
    }

    static func connectAndDisconnect(_ sse: ServerSentEventManager) async throws {
        try await sse.connect()
        try await sse.disconnect()
        await sse.terminate()
    }

    static func receive(_ sse: ServerSentEventManager, log: Log) async {
        for await event in await sse.events {
            print(event.id)    // optional event ID
            print(event.event) // optional event type/name
            print(event.data)  // event payload
            print(event.retry) // optional server-suggested retry interval (ms)
            log.withLockedValue { $0.append(event.data) }
        }
    }

    static func observe(_ sse: ServerSentEventManager, log: Log) async {
        for await state in await sse.stateEvents {
            switch state {
            case .notConnected:
                // initial idle state before connecting
                break
            case .connecting:
                // connection is being established
                break
            case .connected:
                // successfully connected to SSE stream
                log.withLockedValue { $0.append("connected") }
            case .disconnected(let reason):
                switch reason {
                case .streamEnded:
                    // server closed the stream normally
                    break
                case .streamError(let error):
                    // unexpected error
                    _ = error
                case .manuallyDisconnected:
                    // client called disconnect()
                    log.withLockedValue { $0.append("manuallyDisconnected") }
                case .terminated:
                    // client called terminate()
                    log.withLockedValue { $0.append("terminated") }
                }
            }
        }
    }

    static func retry() -> ServerSentEventManager {
        let retryPolicy = RetryPolicy(
            enabled: true,
            maxAttempts: 5,            // nil = unlimited retries
            initialDelay: 1.0,         // seconds before first retry
            maxDelay: 60.0,            // maximum delay cap
            backoffMultiplier: 2.0     // delays: 1s, 2s, 4s, 8s, 16s, ...
        )

        let sse = ServerSentEventManager(
            url: "https://example.com/events",
            retryPolicy: retryPolicy
        )
        return sse
    }

    static func sseCallbacks(url: String = "https://example.com/events") -> ServerSentEventCallbackAdapter {
        let sse = ServerSentEventCallbackAdapter(url: url)

        sse.onEvent { event in
            print(event.data)
        }

        sse.onStateChange { state in
            print(state)
        }

        sse.connect { result in
            switch result {
            case .success:
                // connected
                break
            case .failure(let error):
                // handle error
                _ = error
            }
        }
        return sse
    }

    static func sseCallbacksEnd(_ sse: ServerSentEventCallbackAdapter) {
        // disconnect
        sse.disconnect { result in
            switch result {
            case .success:
                // disconnected
                break
            case .failure(let error):
                // handle error
                _ = error
            }
        }

        // terminate
        sse.terminate()
    }

    static func sseCombine(url: String = "https://example.com/events", cancellables: inout Set<AnyCancellable>) -> ServerSentEventPublisherAdapter {
        let sse = ServerSentEventPublisherAdapter(url: url)

        sse.events
            .sink { event in
                print(event.data)
            }
            .store(in: &cancellables)

        sse.stateEvents
            .sink { state in
                print(state)
            }
            .store(in: &cancellables)

        sse.connect()
            .sink(receiveCompletion: { completion in
                // handle completion
            }, receiveValue: {
                // connected
            })
            .store(in: &cancellables)
        return sse
    }

    // MARK: WebSocket

    static func webSocketInitialize() {
        let ws = WebSocket(url: "ws://127.0.0.1:8080/example")
        _ = ws
    }

    static func webSocketRequest() -> WebSocket {
        let request = WebSocketRequest(
            url: "ws://127.0.0.1:8080/example",
            protocols: ["chat"],
            additionalheaders: [
                .contentType(.json),
                .authentication(.bearer("token"))
            ]
        )
        let ws = WebSocket(request: request)
        return ws
    }

    static func pingConfig(request: WebSocketRequest) {
        let pingConfig = PingConfig(pingInterval: .seconds(30), maxPingFailures: 3)

        let ws1 = WebSocket(url: "ws://127.0.0.1:8080/example", pingConfig: pingConfig)
        let ws2 = WebSocket(request: request, pingConfig: pingConfig)
        _ = (ws1, ws2)
    }

    static func webSocketLifecycle(_ ws: WebSocket) async throws {
        try await ws.connect()

        /// sending string message
        try await ws.send(.string("some string message"))

        /// sending data message
        try await ws.send(.data("some data message".data(using: .utf8)))

        try await ws.disconnect()
    }

    static func webSocketTerminate(_ ws: WebSocket) async throws {
        try await ws.terminate()
    }

    static func webSocketMessages(_ sut: WebSocket, log: Log) async {
        for await message in await sut.messages {
            switch message {
            case .string(let msg):
                // handle string messages
                log.withLockedValue { $0.append("string \(msg)") }
            case .data(let msg):
                // handle data messages
                log.withLockedValue { $0.append("data \(msg.count)") }
            }
        }
    }

    static func webSocketStates(_ sut: WebSocket, log: Log) async {
        for await state in await sut.stateEvents {
            switch state {
                case .notConnected:
                    // handle notConnected state (initial idle state before connecting to socket)
                    break
                case .connecting:
                    // handle connecting state (socket is in process of connecting)
                    break
                case .connected(protocol: _):
                    // handle connected state (socket successfully connected)
                    log.withLockedValue { $0.append("connected") }
                case .disconnected(_):
                    // handle disconnected state (socket lost connection. Due to user manual disconnect or server connection lost)
                    log.withLockedValue { $0.append("disconnected") }
            }
        }
    }

    static func webSocketCallbacks(url: String = "ws://127.0.0.1:8080/example", log: Log) -> WebSocketCallbackAdapter {
        let ws = WebSocketCallbackAdapter(url: url)

        ws.onMessage { message in
            switch message {
            case .string(let msg):
                // handle string messages
                log.withLockedValue { $0.append(msg) }
            case .data(let msg):
                // handle data messages
                _ = msg
            }
        }

        ws.onStateChange { state in
            print(state)
        }

        ws.connect { result in
            switch result {
            case .success:
                // connected
                // send a message
                ws.send(.string("hello")) { result in
                    switch result {
                    case .success:
                        // message sent
                        break
                    case .failure(let error):
                        // handle error
                        _ = error
                    }
                }
            case .failure(let error):
                // handle error
                _ = error
            }
        }
        return ws
    }

    static func webSocketCallbacksEnd(_ ws: WebSocketCallbackAdapter) {
        // disconnect (can reconnect later)
        ws.disconnect { result in
            switch result {
            case .success:
                // disconnected
                break
            case .failure(let error):
                // handle error
                _ = error
            }
        }

        // terminate (permanent shutdown)
        ws.terminate()
    }

    static func webSocketCombine(url: String = "ws://127.0.0.1:8080/example", log: Log, cancellables: inout Set<AnyCancellable>) -> WebSocketPublisherAdapter {
        let ws = WebSocketPublisherAdapter(url: url)

        ws.messages
            .sink { message in
                switch message {
                case .string(let msg):
                    // handle string messages
                    log.withLockedValue { $0.append(msg) }
                case .data(let msg):
                    // handle data messages
                    _ = msg
                }
            }
            .store(in: &cancellables)

        ws.stateEvents
            .sink { state in
                print(state)
            }
            .store(in: &cancellables)

        ws.connect()
            .sink(receiveCompletion: { completion in
                // handle completion
            }, receiveValue: {
                // connected
            })
            .store(in: &cancellables)
        return ws
    }

    static func webSocketCombineSend(_ ws: WebSocketPublisherAdapter, cancellables: inout Set<AnyCancellable>) {
        // send a message
        ws.send(.string("hello"))
            .sink(receiveCompletion: { completion in
                // handle completion
            }, receiveValue: {
                // message sent
            })
            .store(in: &cancellables)
    }
}

@Suite("Seed 004: SSE and WebSocket examples, against the in-process server")
struct Seed004Tests {
    @Test("string URLs, SSERequest with HTTPHeader, and a RetryPolicy in seconds build without throwing")
    func builds() {
        Seed004.initialize()
        Seed004.initializeWithRequest()
        Seed004.webSocketInitialize()
        let request = Seed004.webSocketRequest().request
        #expect(request.protocols == ["chat"])
        #expect(request.additionalHeaders == ["Content-Type": "application/json", "Authorization": "Bearer token"])
        Seed004.pingConfig(request: request)
        let policy = Seed004.retry().retryPolicy
        #expect(policy.maxAttempts == 5 && policy.initialDelay == .seconds(1) && policy.maxDelay == .seconds(60))
    }

    @Test("SSE: events, states, disconnect and terminate as the seed writes them")
    func serverSentEvents() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                let sse = ServerSentEventManager(url: server.httpURL("/events?interval=20").absoluteString)
                let events = Log()
                let states = Log()
                let receiving = Task { await Seed004.receive(sse, log: events) }
                let observing = Task { await Seed004.observe(sse, log: states) }
                try await sse.connect()
                await events.wait { $0.count >= 2 }
                try await Seed004.connectAndDisconnect(sse)
                await receiving.value
                await observing.value
                #expect(events.values.allSatisfy { $0.contains("\"n\"") })
                #expect(states.values.suffix(2) == ["manuallyDisconnected", "terminated"])
            }
        }
    }

    @Test("WebSocket: send .string and .data (from an optional), receive, states, terminate")
    func webSocket() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                let ws = WebSocket(url: server.webSocketURL("/echo").absoluteString)
                let messages = Log()
                let states = Log()
                let receiving = Task { await Seed004.webSocketMessages(ws, log: messages) }
                let observing = Task { await Seed004.webSocketStates(ws, log: states) }
                try await Seed004.webSocketLifecycle(ws)
                #expect(ws.state == .disconnected)
                try await ws.connect()
                try await Seed004.webSocketTerminate(ws)
                await receiving.value
                await observing.value
                #expect(messages.values == ["string some string message", "data 17"])
                #expect(states.values == ["connected", "disconnected", "connected", "disconnected"])
            }
        }
    }

    @Test("the callback adapters: connect, then send in the completion; the echo comes back")
    func callbacks() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                let log = Log()
                let ws = Seed004.webSocketCallbacks(url: server.webSocketURL("/echo").absoluteString, log: log)
                await log.wait { $0 == ["hello"] }
                Seed004.webSocketCallbacksEnd(ws)
                let sse = Seed004.sseCallbacks(url: server.httpURL("/events?interval=20").absoluteString)
                let states = sse.manager.stateEvents
                _ = try await states.first(within: .seconds(10)) { $0 == .connected }
                Seed004.sseCallbacksEnd(sse)
                _ = try await states.first(within: .seconds(10)) { $0 == .disconnected(.terminated) }
            }
        }
    }

    @Test("the Combine adapters: connect, send, messages")
    func combine() async throws {
        try await withDuplexServer { server in
            try await withTimeout(.seconds(20)) {
                var cancellables = Set<AnyCancellable>()
                let log = Log()
                let ws = Seed004.webSocketCombine(url: server.webSocketURL("/echo").absoluteString, log: log, cancellables: &cancellables)
                _ = try await ws.socket.stateEvents.first(within: .seconds(10)) { $0 == .connected }
                Seed004.webSocketCombineSend(ws, cancellables: &cancellables)
                await log.wait { $0 == ["hello"] }
                let sse = Seed004.sseCombine(url: server.httpURL("/events?interval=20").absoluteString, cancellables: &cancellables)
                _ = try await sse.manager.stateEvents.first(within: .seconds(10)) { $0 == .connected }
                ws.terminate()
                sse.terminate()
                cancellables.removeAll()
            }
        }
    }
}
