import Duplex
import DuplexSchema
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// A client's transport on a ``SimulatedNetwork``: each connection attempt crosses the link to
/// the server its URL names, and is accepted, refused (server down, or none there) or left
/// unanswered (a partition) until the configuration's connect timeout.
struct SimulatedTransport: WebSocketTransport {
    let network: SimulatedNetwork
    /// The client's number in the log (`c1`).
    let client: Int

    func connect(
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) async throws -> any WebSocketTransportConnection {
        let number = network.nextConnection()
        let connection = SimulatedConnection(
            network: network, label: "c\(client)#\(number)", number: number, closeTimeout: configuration.closeTimeout, delegate: delegate)
        network.record("\(connection.label) connect \(request.url.absoluteString)")
        let attempt = Attempt<Void>()
        try await attempt.run { start(connection, request: request, configuration: configuration, attempt: attempt) }
        return connection
    }

    /// The attempt's packets: the opening handshake there and back, and the connect timeout.
    private func start(_ connection: SimulatedConnection, request: WebSocketRequest, configuration: WebSocketConfiguration, attempt: Attempt<Void>) {
        let (network, clock) = (self.network, network.clock)
        let server = network.server(for: request.url)
        let timeout = clock.schedule(at: clock.now.advanced(by: configuration.connectTimeout)) {
            if attempt.isPending { network.record("\(connection.label) connect timed out") }
            attempt.finish(.failure(WebSocketError(.connectTimeout, "no answer within \(configuration.connectTimeout) (simulated)")))
        }
        var upstream = clock.now
        network.deliver(at: network.arrival(bytes: 300, upstream: true, after: &upstream)) {
            let acceptance = server?.accept(connection, request: request) ?? .down
            let answered: @Sendable () -> Void = {
                clock.cancel(timeout)
                guard attempt.isPending else {
                    // Timed out or cancelled meanwhile: the client has gone.
                    if case .echo = acceptance { server?.forget(connection) }
                    if case .route = acceptance {
                        server?.forget(connection)
                        connection.route.withLockedValue { $0 }?.clientLeft()
                    }
                    return
                }
                switch acceptance {
                case .echo, .route:
                    connection.opened(server: server)
                    network.record("\(connection.label) open")
                    attempt.finish(.success(()))
                case .refused(let status):
                    network.record("\(connection.label) refused with HTTP \(status)")
                    attempt.finish(
                        .failure(
                            WebSocketError(
                                .upgradeRejected, "the server answered the WebSocket handshake with HTTP \(status) (simulated)", status: status)))
                case .down:
                    network.record("\(connection.label) refused")
                    let place = "\(server == nil ? "no server at" : "server down at") \(request.url.host ?? "")"
                    attempt.finish(.failure(WebSocketError(.connectionFailed, "connection refused (simulated: \(place))")))
                }
            }
            if case .route(let subprotocol, let service) = acceptance {
                // The answer goes first on the connection's way back, then what the route sends
                // as it starts.
                connection.send(upstream: false, bytes: 200, answered)
                connection.attach(service, subprotocol: subprotocol, configuration: configuration)
            } else {
                var downstream = clock.now
                network.deliver(at: network.arrival(bytes: 200, upstream: false, after: &downstream), answered)
            }
        }
    }
}

/// A connection attempt's outcome, given once: accepted (with its `Value`), refused, timed out or
/// cancelled.
final class Attempt<Value: Sendable>: Sendable {
    private enum Phase {
        case starting
        case waiting(CheckedContinuation<Value, any Error>)
        /// Finished before the wait began (cancelled at once).
        case finishedEarly(Result<Value, any Error>)
        case done
    }

    private let phase = NIOLockedValueBox(Phase.starting)

    /// Waits for the outcome, after `start` (which sets the attempt going) and unless cancelled.
    func run(_ start: () -> Void) async throws -> Value {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
                begin(continuation)
                start()
            }
        } onCancel: {
            finish(.failure(CancellationError()))
        }
    }

    private func begin(_ continuation: CheckedContinuation<Value, any Error>) {
        let early = phase.withLockedValue { phase -> Result<Value, any Error>? in
            if case .finishedEarly(let result) = phase {
                phase = .done
                return result
            }
            phase = .waiting(continuation)
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    var isPending: Bool {
        phase.withLockedValue { phase in
            if case .waiting = phase { true } else { false }
        }
    }

    func finish(_ result: Result<Value, any Error>) {
        let waiting = phase.withLockedValue { phase -> CheckedContinuation<Value, any Error>? in
            switch phase {
            case .starting:
                phase = .finishedEarly(result)
                return nil
            case .waiting(let continuation):
                phase = .done
                return continuation
            case .finishedEarly, .done:
                return nil
            }
        }
        waiting?.resume(with: result)
    }
}

/// One simulated WebSocket connection, both of its ends: the client's transport connection and
/// what its server sees.
final class SimulatedConnection: WebSocketTransportConnection {
    let label: String
    let number: Int
    let network: SimulatedNetwork
    private let closeTimeout: Duration
    let delegate: any WebSocketTransportDelegate

    let path: SimulatedPath
    /// The client sent its close frame (or aborted).
    let closeSent = NIOLockedValueBox(false)
    /// The route serving it, when a scripted route of its server does; nil when echoed.
    let route = NIOLockedValueBox<SimulatedRouteEnd?>(nil)

    init(network: SimulatedNetwork, label: String, number: Int, closeTimeout: Duration, delegate: any WebSocketTransportDelegate) {
        self.network = network
        self.path = SimulatedPath(network: network)
        self.closeTimeout = closeTimeout
        self.label = label
        self.number = number
        self.delegate = delegate
    }

    var negotiatedProtocol: String? { route.withLockedValue { $0?.subprotocol } }

    func opened(server: SimulatedServer?) {
        path.opened(server: server)
    }

    func write(_ message: WebSocketMessage) -> Bool {
        network.record("\(label) → \(Self.describe(message))")
        if let end = route.withLockedValue({ $0 }) {
            let frame: ByteBuffer =
                switch message {
                case .string(let text): SimulatedRouteEnd.frame(.text, ByteBuffer(string: text))
                case .data(let data): SimulatedRouteEnd.frame(.binary, ByteBuffer(bytes: data))
                }
            sendFrame(frame, to: end)
            return false
        }
        send(upstream: true, bytes: message.byteCount) { [self] in
            guard let server = liveServer() else { return }
            for answer in server.answers(to: message) { serverSends(answer) }
        }
        return false
    }

    func ping(_ payload: [UInt8]) {
        network.record("\(label) ping")
        if let end = route.withLockedValue({ $0 }) {
            sendFrame(SimulatedRouteEnd.frame(.ping, ByteBuffer(bytes: payload)), to: end)
            return
        }
        send(upstream: true, bytes: payload.count) { [self] in
            guard let server = liveServer(), server.ping else { return }
            send(upstream: false, bytes: payload.count) { [self] in
                guard toClient() else { return }
                network.record("\(label) pong")
                delegate.transportDidReceivePong(payload)
            }
        }
    }

    func close(code: WebSocketCloseCode, reason: String) {
        let first = closeSent.withLockedValue { sent -> Bool in
            defer { sent = true }
            return !sent && path.reachesClient
        }
        guard first else { return }
        network.record("\(label) close \(code.rawValue) from client")
        let end = route.withLockedValue { $0 }
        network.clock.schedule(at: network.clock.now.advanced(by: closeTimeout)) { [self] in
            // The client closes TCP: the route sees its end.
            if let end { send(upstream: true, bytes: 0) { end.clientLeft() } }
            ended(code: nil, reason: "", error: WebSocketError(.connectionLost, "no close frame within \(closeTimeout) (simulated)"))
        }
        if let end {
            // The route answers in its own handler, and closes; its close frame ends it here.
            if let frame = end.clientCloses(code: code, reason: reason) { sendFrame(frame, to: end) }
            return
        }
        // The server answers with the same code; without an answer, the close timeout ends it.
        send(upstream: true, bytes: 2 + reason.utf8.count) { [self] in
            guard let server = liveServer() else { return }
            server.forget(self)
            path.closeForServer()
            send(upstream: false, bytes: 2) { [self] in
                ended(code: code, reason: reason, error: nil)
            }
        }
    }

    func abort() {
        network.record("\(label) aborted by client")
        closeSent.withLockedValue { $0 = true }
        let end = route.withLockedValue { $0 }
        send(upstream: true, bytes: 0) { [self] in
            guard let server = liveServer() else { return }
            server.forget(self)
            path.closeForServer()
            end?.clientLeft()
        }
        network.clock.schedule(at: network.clock.now) { [self] in ended(code: nil, reason: "", error: nil) }
    }

    // MARK: The server's end

    /// The server sends `message`.
    func serverSends(_ message: WebSocketMessage) {
        send(upstream: false, bytes: message.byteCount) { [self] in
            guard toClient() else { return }
            network.record("\(label) ← \(Self.describe(message))")
            delegate.transportDidReceive(message)
        }
    }

    /// The server went down: the client sees the connection drop, with no close frame.
    func serverDropped() {
        path.closeForServer()
        route.withLockedValue { $0 }?.clientLeft()
        send(upstream: false, bytes: 0) { [self] in
            ended(code: nil, reason: "", error: WebSocketError(.connectionLost, "the server went away (simulated)"))
        }
    }

    /// The server closes with a close frame.
    func serverClosed(code: WebSocketCloseCode, reason: String) {
        path.closeForServer()
        route.withLockedValue { $0 }?.clientLeft()
        network.record("\(label) close \(code.rawValue) from server")
        send(upstream: false, bytes: 2 + reason.utf8.count) { [self] in
            ended(code: code, reason: reason, error: nil)
        }
    }

    // MARK: Helpers

    func send(upstream: Bool, bytes: Int, _ delivery: @escaping @Sendable () -> Void) {
        path.send(upstream: upstream, bytes: bytes, delivery)
    }

    /// Its path is gone (``SimulatedNetwork/switchPath()``).
    func blackhole() {
        path.blackhole()
    }

    func liveServer() -> SimulatedServer? {
        path.liveServer
    }

    func toClient() -> Bool {
        path.reachesClient
    }

    func ended(code: WebSocketCloseCode?, reason: String, error: WebSocketError?) {
        guard path.closeForClient() else { return }
        network.record("\(label) closed\(code.map { " \($0.rawValue)" } ?? " with no close frame")")
        delegate.transportDidClose(code: code, reason: reason, error: error, unwrittenMessages: 0)
    }

    static func describe(_ message: WebSocketMessage) -> String {
        switch message {
        case .string(let text): "text \(text.utf8.count) bytes"
        case .data(let data): "binary \(data.count) bytes"
        }
    }
}

extension WebSocketMessage {
    fileprivate var byteCount: Int {
        switch self {
        case .string(let text): text.utf8.count
        case .data(let data): data.count
        }
    }
}
