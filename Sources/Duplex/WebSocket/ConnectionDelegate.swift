import DuplexSchema

/// Routes one connection's transport reports to the core, tagged with the connection's
/// generation. It holds the core weakly, so a socket released by its owner goes away.
final class ConnectionDelegate: WebSocketTransportDelegate {
    weak let core: WebSocketCore?
    let generation: UInt64

    init(core: WebSocketCore, generation: UInt64) {
        self.core = core
        self.generation = generation
    }

    func transportDidReceive(_ message: WebSocketMessage) {
        core?.received(message, generation: generation)
    }

    func transportDidReceivePong(_ payload: [UInt8]) {
        core?.receivedPong(payload, generation: generation)
    }

    func transportShouldRead() -> Bool {
        core?.gate.isOpen ?? true
    }

    func transportDidDrain() {
        core?.drained(generation: generation)
    }

    func transportWillFail(_ proceed: @escaping @Sendable () -> Void) {
        guard let core else { return proceed() }
        core.whenDeliveredHandled(generation: generation, proceed)
    }

    func transportDidClose(code: WebSocketCloseCode?, reason: String, error: WebSocketError?, unwrittenMessages: Int) {
        core?.closed(generation: generation, code: code, reason: reason, error: error, unwritten: unwrittenMessages)
    }
}
