import Duplex
import DuplexSchema
import NIOConcurrencyHelpers
import NIOCore

/// The upstream's side of a proxied WebSocket: the delegate of the connection Duplex made to the
/// upstream (``WebSocketUpstream``), handing what arrives to the connection's
/// ``ProxyWebSocketService`` on its event loop.
///
/// The upstream's connection is made on the client connection's event loop, so each message goes
/// on at once, with no hop; on another loop, it would go through the service's loop in order.
/// What arrives before the service starts (the upstream's first messages can come with its
/// handshake's answer) is kept for it: no more than one read, since the upstream is not read
/// until the service asks for more.
final class ProxyUpstreamLeg: WebSocketTransportDelegate, @unchecked Sendable {
    /// What the upstream did, in the order it did it.
    enum Event {
        /// A whole message.
        case message(ScriptedMessage)
        /// Its connection ended: the close frame's code and reason (nil code: none came), and
        /// whether Duplex failed it for breaking the protocol.
        case closed(code: WebSocketCloseCode?, reason: String, failed: Bool)
    }

    private let loop: any EventLoop
    /// Whether the upstream's connection may read: set on the loop, asked by the transport.
    private let reading = NIOLockedValueBox(false)
    /// On the loop: the service, once started, until the upstream's connection ends.
    private var service: ProxyWebSocketService?
    /// On the loop: what arrived before the service started.
    private var early: [Event] = []

    init(loop: any EventLoop) {
        self.loop = loop
    }

    /// The service takes over: what arrived before it is handed to it first. On the loop.
    func attach(_ service: ProxyWebSocketService) {
        loop.preconditionInEventLoop()
        self.service = service
        let early = self.early
        self.early = []
        for event in early { handle(event) }
    }

    /// Lets the upstream's connection read, or holds it back; true when that changed. On the loop.
    func setReading(_ on: Bool) -> Bool {
        reading.withLockedValue { reading in
            defer { reading = on }
            return reading != on
        }
    }

    private func onLoop(_ body: @escaping @Sendable (ProxyUpstreamLeg) -> Void) {
        if loop.inEventLoop {
            body(self)
        } else {
            loop.execute { body(self) }
        }
    }

    private func handle(_ event: Event) {
        guard let service else {
            early.append(event)
            return
        }
        service.upstream(event)
        // The service holds the upstream's connection, which holds this: let go of it at the end.
        if case .closed = event { self.service = nil }
    }

    // MARK: WebSocketTransportDelegate

    func transportDidReceive(_ message: WebSocketMessage) {
        let scripted: ScriptedMessage =
            switch message {
            case .string(let text): .text(text)
            case .data(let data): .binary(data)
            }
        onLoop { $0.handle(.message(scripted)) }
    }

    func transportDidReceivePong(_ payload: [UInt8]) {}

    func transportShouldRead() -> Bool {
        reading.withLockedValue { $0 }
    }

    func transportDidDrain() {
        onLoop { $0.service?.upstreamDrained() }
    }

    func transportDidClose(code: WebSocketCloseCode?, reason: String, error: WebSocketError?, unwrittenMessages: Int) {
        let failed = error?.closeCode != nil
        onLoop { $0.handle(.closed(code: code, reason: reason, failed: failed)) }
    }
}
