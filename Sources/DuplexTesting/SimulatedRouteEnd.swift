import Duplex
import DuplexHost
import DuplexWire
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// The two halves of a connection a scripted route serves on a simulated network: the server's,
/// the Duplex server's own `EventLoopWebSocketHandler` with the route's service in a
/// ``SimulatedChannel`` on the network's event loop; and the client's reading of what that
/// handler writes, through the client's `WebSocketEngine` (frames, fragments, UTF-8, control
/// frames and the close handshake, read as the NIO transport reads them).
///
/// The channel is touched on the network's loop only; the client's half is behind a lock.
final class SimulatedRouteEnd: Sendable {
    /// The subprotocol the route chose.
    let subprotocol: String?
    private let loop: ClockEventLoop
    private let channel: NIOLockedValueBox<SimulatedChannel?>

    private struct Reader {
        var engine: WebSocketEngine
        var parser: WebSocketFrameParser
        /// The server's close frame, once read.
        var peerClose: (code: WebSocketCloseCode, reason: String)?
        /// What broke the protocol, once read.
        var failure: WebSocketError?
    }

    private let reader: NIOLockedValueBox<Reader>

    /// The client's frames are masked with one key: what it is changes nothing the route sees,
    /// and a fixed one keeps a run's bytes the same.
    private static let maskKey = WebSocketMaskingKey([0x37, 0xFA, 0x21, 0x3D])

    init(subprotocol: String?, loop: ClockEventLoop, maxMessageBytes: Int) {
        self.subprotocol = subprotocol
        self.loop = loop
        self.channel = NIOLockedValueBox(nil)
        self.reader = NIOLockedValueBox(
            Reader(
                engine: WebSocketEngine(role: .client, maxMessageBytes: maxMessageBytes),
                parser: WebSocketFrameParser(maxFrameSize: maxMessageBytes)
            ))
    }

    /// Opens the server's half: the channel, then the handler with `service`, which starts it
    /// (the route's `onConnect`). What it writes goes to `wrote`; `closed` is called when it
    /// closes the connection.
    func start(
        service: any EventLoopWebSocketService,
        maxMessageBytes: Int,
        closeTimeout: Duration,
        wrote: @escaping (ByteBuffer) -> Void,
        closed: @escaping () -> Void
    ) {
        let channel = SimulatedChannel(loop: loop, flushed: wrote, closedByServer: closed)
        self.channel.withLockedValue { $0 = channel }
        channel.open()
        let metrics = ServerMetrics()
        let handler = EventLoopWebSocketHandler(
            configuration: .init(maxMessageBytes: maxMessageBytes, closeTimeout: closeTimeout),
            registry: ConnectionRegistry(metrics: metrics),
            service: service,
            metrics: metrics
        )
        do {
            try channel.pipeline.syncOperations.addHandler(handler)
        } catch {
            channel.close(promise: nil)
        }
    }

    // MARK: The server's half

    /// The client's bytes reach the server.
    func serverReceives(_ bytes: ByteBuffer) {
        onLoop { $0.receive(bytes) }
    }

    /// The client's end is gone: the server sees its connection end.
    func clientLeft() {
        onLoop { $0.clientLeft() }
    }

    private func onLoop(_ work: @escaping @Sendable (SimulatedChannel) -> Void) {
        guard let channel = channel.withLockedValue({ $0 }) else { return }
        let bound = UncheckedChannel(channel: channel)
        if loop.inEventLoop { work(bound.channel) } else { loop.execute { work(bound.channel) } }
    }

    // MARK: The client's half

    /// A client frame, masked.
    static func frame(_ opcode: WebSocketOpcode, _ payload: ByteBuffer) -> ByteBuffer {
        WebSocketFrameBytes.encode(opcode: opcode, payload: payload, maskKey: maskKey, allocator: ByteBufferAllocator()).0
    }

    /// A client close frame: `code` and `reason`; no payload with no code.
    static func closeFrame(_ code: WebSocketCloseCode?, _ reason: String) -> ByteBuffer {
        frame(.connectionClose, WebSocketEngine.closePayload(code, reason: reason, allocator: ByteBufferAllocator()))
    }

    /// What the client does with the server's bytes, in order: the engine's actions.
    func clientReads(_ bytes: ByteBuffer) -> [WebSocketEngine.Action] {
        reader.withLockedValue { reader in
            reader.parser.append(bytes)
            var actions: [WebSocketEngine.Action] = []
            while let action = reader.engine.nextAction(from: &reader.parser) {
                switch action {
                case .replyToClose(let code, let reason), .closeHandshakeDone(let code, let reason):
                    reader.peerClose = (code ?? .noStatusReceived, reason)
                case .fail(let code, let reason, _):
                    reader.failure = WebSocketError(code == .messageTooBig ? .messageTooBig : .protocolViolation, reason, closeCode: code)
                default: break
                }
                actions.append(action)
            }
            return actions
        }
    }

    /// The client starts the close handshake: the close frame to send, unless one was.
    func clientCloses(code: WebSocketCloseCode, reason: String) -> ByteBuffer? {
        let action = reader.withLockedValue { $0.engine.close(code: code, reason: reason) }
        guard case .sendClose(let code, let reason) = action else { return nil }
        return Self.closeFrame(code, reason)
    }

    /// How the connection ended for the client, once the server closed it: the server's close
    /// frame, and what broke the protocol.
    var outcome: (close: (code: WebSocketCloseCode, reason: String)?, failure: WebSocketError?) {
        reader.withLockedValue { ($0.peerClose, $0.failure) }
    }
}

/// The channel, carried to its loop's thread (it is touched there only).
private struct UncheckedChannel: @unchecked Sendable {
    let channel: SimulatedChannel
}

// MARK: A connection served by a route

extension SimulatedConnection {
    /// The server accepted it with a scripted route: `service` starts now, on the network's loop.
    func attach(_ service: any EventLoopWebSocketService, subprotocol: String?, configuration: WebSocketConfiguration) {
        let end = SimulatedRouteEnd(subprotocol: subprotocol, loop: network.eventLoop, maxMessageBytes: configuration.maxMessageBytes)
        route.withLockedValue { $0 = end }
        network.track { end.clientLeft() }
        end.start(
            service: service,
            maxMessageBytes: configuration.maxMessageBytes,
            closeTimeout: configuration.closeTimeout,
            wrote: { [weak self] bytes in self?.routeWrote(bytes) },
            closed: { [weak self] in self?.routeClosed() }
        )
    }

    /// Sends a frame to the route: it arrives after the link's delay, unless the server's end
    /// is gone by then.
    func sendFrame(_ frame: ByteBuffer, to end: SimulatedRouteEnd) {
        send(upstream: true, bytes: frame.readableBytes) { [self] in
            guard liveServer() != nil else { return }
            end.serverReceives(frame)
        }
    }

    /// The route wrote `bytes`: they cross the link, and the client reads them.
    private func routeWrote(_ bytes: ByteBuffer) {
        guard let end = route.withLockedValue({ $0 }) else { return }
        send(upstream: false, bytes: bytes.readableBytes) { [self] in
            guard toClient() else { return }
            for action in end.clientReads(bytes) { perform(action, end: end) }
        }
    }

    /// What the client's engine asks for, as the NIO transport carries it out.
    private func perform(_ action: WebSocketEngine.Action, end: SimulatedRouteEnd) {
        switch action {
        case .deliver(let opcode, let payload):
            let message: WebSocketMessage = opcode == .text ? .string(String(buffer: payload)) : .data(Data(payload.readableBytesView))
            network.record("\(label) ← \(Self.describe(message))")
            delegate.transportDidReceive(message)
        case .sendPong(let payload):
            sendFrame(SimulatedRouteEnd.frame(.pong, payload), to: end)
        case .pongReceived(let payload):
            network.record("\(label) pong")
            delegate.transportDidReceivePong(Array(payload.readableBytesView))
        case .replyToClose(let code, _):
            network.record("\(label) close \(code.map { String($0.rawValue) } ?? "with no code") from server")
            closeSent.withLockedValue { $0 = true }
            sendFrame(SimulatedRouteEnd.closeFrame(code, ""), to: end)
        case .sendClose(let code, let reason):
            sendFrame(SimulatedRouteEnd.closeFrame(code, reason), to: end)
        case .fail(let code, let reason, let sendCloseFrame):
            network.record("\(label) fails \(code.rawValue): \(reason)")
            closeSent.withLockedValue { $0 = true }
            if sendCloseFrame { sendFrame(SimulatedRouteEnd.closeFrame(code, reason), to: end) }
            send(upstream: true, bytes: 0) { end.clientLeft() }
            ended(code: code, reason: reason, error: end.outcome.failure)
        case .closeHandshakeDone, .inflate, .none:
            break
        }
    }

    /// The route closed the connection (TCP): the client learns it after the link's delay, with
    /// the close frame it read, if any.
    private func routeClosed() {
        guard let end = route.withLockedValue({ $0 }) else { return }
        // The server no longer counts it.
        liveServer()?.forget(self)
        path.closeForServer()
        send(upstream: false, bytes: 0) { [self] in
            let (close, failure) = end.outcome
            let lost = close == nil && failure == nil
            ended(
                code: close?.code, reason: close?.reason ?? "",
                error: failure ?? (lost ? WebSocketError(.connectionLost, "the route closed the connection with no close frame (simulated)") : nil))
        }
    }
}
