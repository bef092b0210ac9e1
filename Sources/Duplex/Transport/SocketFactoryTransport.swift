import DuplexSchema
import DuplexWire
import NIOConcurrencyHelpers

/// The transport of a ``ReconnectingWebSocket``: each connection is a fresh socket from the
/// caller's factory, connected, and carried as a transport connection, so that the wrapper runs
/// the same ``WebSocketCore`` and lifecycle as a ``WebSocket`` does. The sockets should not
/// reconnect on their own: the wrapper's lifecycle does.
struct SocketFactoryTransport: WebSocketTransport {
    let factory: @Sendable () -> any WebSocketProtocol
    /// The wrapper's clock: the tasks that carry each socket run on its executor, if it has one.
    let clock: any Clock<Duration>

    func connect(
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        delegate: any WebSocketTransportDelegate
    ) async throws -> any WebSocketTransportConnection {
        let socket = factory()
        // Subscribed before connecting, so nothing the socket receives is missed.
        let events = socket.events
        do {
            try await socket.connect()
        } catch {
            await socket.terminate()
            throw error as? WebSocketError ?? WebSocketError(.connectionFailed, "\(error)")
        }
        return SocketConnection(
            socket: socket, events: events, delegate: delegate, highWatermark: configuration.sendBufferHighWatermark, clock: clock)
    }
}

/// One socket from the factory as a transport connection: its events go to the delegate (no
/// further while the delegate's readers are behind, so the socket's own stream fills and it
/// stops reading from the network), and writes go to it in order through one writer.
final class SocketConnection: WebSocketTransportConnection {
    private enum Write {
        case message(WebSocketMessage)
        case flush(@Sendable (Result<Void, any Error>) -> Void)
    }

    private struct State {
        /// Bytes handed to the writer and not yet sent.
        var pendingBytes = 0
        var aboveHighWatermark = false
        /// Messages the socket refused (its connection ended): reported with the close.
        var unwritten = 0
        var readWaiter: CheckedContinuation<Void, Never>?
    }

    private let socket: any WebSocketProtocol
    private let writes: AsyncStream<Write>.Continuation
    private let state = NIOLockedValueBox(State())
    private let highWatermark: Int

    init(
        socket: any WebSocketProtocol, events: AsyncStream<WebSocketEvent>, delegate: any WebSocketTransportDelegate, highWatermark: Int,
        clock: any Clock<Duration>
    ) {
        self.socket = socket
        self.highWatermark = highWatermark
        let (writeStream, writes) = AsyncStream.makeStream(of: Write.self)
        self.writes = writes
        // Ends when the socket's events end (it closed or was terminated): then the writer
        // finishes what it was given, and the close is reported with what it could not write.
        Task(on: clock) { [self] in
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.write(writeStream, delegate: delegate) }
                let close = await pump(events, to: delegate)
                writes.finish()
                await group.waitForAll()
                let unwritten = state.withLockedValue { $0.unwritten }
                delegate.transportDidClose(code: close.code, reason: close.reason, error: close.error, unwrittenMessages: unwritten)
            }
        }
    }

    private func write(_ writeStream: AsyncStream<Write>, delegate: any WebSocketTransportDelegate) async {
        for await write in writeStream {
            switch write {
            case .message(let message):
                do {
                    try await socket.send(message)
                } catch {
                    state.withLockedValue { $0.unwritten += 1 }
                }
                wrote(message.byteCount, delegate: delegate)
            case .flush(let completion):
                completion(.success(()))
            }
        }
    }

    /// Hands the socket's events to the delegate until it closes; returns how it closed.
    private func pump(
        _ events: AsyncStream<WebSocketEvent>,
        to delegate: any WebSocketTransportDelegate
    ) async -> (code: WebSocketCloseCode?, reason: String, error: WebSocketError?) {
        var lastError: WebSocketError?
        for await event in events {
            while !delegate.transportShouldRead() {
                await withCheckedContinuation { continuation in
                    state.withLockedValue { $0.readWaiter = continuation }
                    // The readers may have caught up meanwhile: look again.
                    if delegate.transportShouldRead() { resumeReading() }
                }
            }
            switch event {
            case .connected:
                continue
            case .message(let message):
                delegate.transportDidReceive(message)
            case .error(let error):
                lastError = error
            case .disconnected(let code, let reason):
                return (code, reason ?? "", lastError)
            }
        }
        // Terminated with no close event.
        return (nil, "", lastError)
    }

    private func wrote(_ bytes: Int, delegate: any WebSocketTransportDelegate) {
        let drained = state.withLockedValue { state in
            state.pendingBytes -= bytes
            guard state.aboveHighWatermark, state.pendingBytes == 0 else { return false }
            state.aboveHighWatermark = false
            return true
        }
        if drained { delegate.transportDidDrain() }
    }

    var negotiatedProtocol: String? {
        if case .connected(let chosen) = socket.state { chosen } else { nil }
    }

    func write(_ message: WebSocketMessage) -> Bool {
        let above = state.withLockedValue { state in
            state.pendingBytes += message.byteCount
            if state.pendingBytes > highWatermark { state.aboveHighWatermark = true }
            return state.aboveHighWatermark
        }
        if case .terminated = writes.yield(.message(message)) {
            // The socket's connection already ended: reported with its close.
            state.withLockedValue { $0.unwritten += 1 }
        }
        return above
    }

    func flush(_ completion: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        if case .terminated = writes.yield(.flush(completion)) {
            completion(.failure(WebSocketError(.notConnected, "the connection ended")))
        }
    }

    /// The wrapper's own pings are off: each socket pings as its configuration says.
    func ping(_ payload: [UInt8]) {}

    func close(code: WebSocketCloseCode, reason: String) {
        socket.close(code: code, reason: reason)
    }

    func abort() {
        socket.close(code: .goingAway, reason: "")
    }

    func resumeReading() {
        state.withLockedValue { state in
            defer { state.readWaiter = nil }
            return state.readWaiter
        }?.resume()
    }
}
