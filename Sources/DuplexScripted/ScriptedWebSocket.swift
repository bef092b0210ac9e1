import DuplexHost
import DuplexSchema
public import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// One connection of a scripted WebSocket route, as its handlers get it: send, ping, close or
/// drop, from the handlers or from any task.
///
/// Calls made on the connection's event loop (from the route's handlers) act at once; calls from
/// elsewhere act on the event loop soon after, in the order they were made. The route's
/// ``WebSocketFaults`` apply to every message sent, and everything is journaled
/// (`DuplexServer.journal`).
public final class ScriptedWebSocket: Sendable {
    /// The upgrade request, with the subprotocol chosen.
    public let request: ScriptedRequest
    /// The connection's number in the journal.
    public let connection: Int

    private let journal: ScriptJournal
    private let faults: WebSocketFaults
    private let eventLoop: any EventLoop
    /// The handler and its context while the connection is served; on the event loop only.
    private let served: NIOLoopBoundBox<Served>
    private let state: NIOLockedValueBox<State>

    private struct Served {
        var handler: EventLoopWebSocketHandler?
        var context: ChannelHandlerContext?
        /// Messages sent (after faults), for ``WebSocketFaults/dropAfterSending``.
        var sent = 0
        /// A message kept back for ``WebSocketFaults/reorderSends``.
        var heldBack: Outgoing?
    }

    private struct State {
        var phase = Phase.open
        var received = 0
        var answerPings: Bool
    }

    enum Phase: Equatable {
        case open
        /// The server started the close handshake or dropped the connection.
        case closedByServer
        /// The client closed, or went away.
        case closedByClient
    }

    enum Outgoing {
        case text(String)
        case binary(Data)
    }

    init(request: ScriptedRequest, connection: Int, journal: ScriptJournal, faults: WebSocketFaults, answerPings: Bool, eventLoop: any EventLoop) {
        self.request = request
        self.connection = connection
        self.journal = journal
        self.faults = faults
        self.eventLoop = eventLoop
        self.served = NIOLoopBoundBox(Served(), eventLoop: eventLoop)
        self.state = NIOLockedValueBox(State(answerPings: answerPings))
    }

    /// How many messages the client sent so far.
    public var messagesReceived: Int {
        state.withLockedValue { $0.received }
    }

    /// Whether the client's pings are answered; false withholds the pongs (the client's pings
    /// then fail, as on a link that lost its peer).
    public var answerPings: Bool {
        get { state.withLockedValue { $0.answerPings } }
        set { state.withLockedValue { $0.answerPings = newValue } }
    }

    /// The former name of ``answerPings``.
    @available(*, deprecated, renamed: "answerPings")
    public var answersPings: Bool {
        get { answerPings }
        set { answerPings = newValue }
    }

    /// Whether a close began (either side) or the connection is gone: nothing can be sent.
    public var isClosed: Bool {
        state.withLockedValue { $0.phase != .open }
    }

    /// Sends a text message.
    /// - Throws: ``ScriptedWebSocketError`` once the connection is closing or closed.
    public func send(_ text: String) throws(ScriptedWebSocketError) {
        try checkOpen("send")
        onLoop { $0.emit(.text(text)) }
    }

    /// Sends a binary message.
    public func send(binary: Data) throws(ScriptedWebSocketError) {
        try checkOpen("send")
        onLoop { $0.emit(.binary(binary)) }
    }

    /// Sends `value` encoded as JSON, as a text message.
    public func send(json value: some Encodable, encoder: JSONEncoder = JSONEncoder()) throws {
        let data = try encoder.encode(value)
        try send(String(decoding: data, as: UTF8.self))
    }

    /// Sends a ping with `payload` (at most 125 bytes).
    public func ping(_ payload: String = "") throws(ScriptedWebSocketError) {
        guard payload.utf8.count <= 125 else { throw ScriptedWebSocketError("a ping's payload is at most 125 bytes (got \(payload.utf8.count))") }
        try checkOpen("ping")
        onLoop { socket in
            guard let (handler, context) = socket.current else { return }
            handler.ping(context.channel.allocator.buffer(string: payload), context: context)
            socket.record(.out, .ping, data: payload)
        }
    }

    /// Sends a text message cut into `frames` frames.
    public func send(_ text: String, frames: Int) throws(ScriptedWebSocketError) {
        guard frames >= 1 else { throw ScriptedWebSocketError("a message is sent in at least 1 frame (got \(frames))") }
        try checkOpen("send")
        onLoop { socket in
            guard let (handler, context) = socket.current else { return }
            socket.writeFragments(.text(text), frames: frames, handler: handler, context: context)
        }
    }

    /// Sends a frame the client must reject (``FrameFault``); the client should fail the
    /// connection with ``FrameFault/expectedCloseCode``.
    public func send(_ fault: FrameFault) throws(ScriptedWebSocketError) {
        try checkOpen("send a fault")
        onLoop { socket in
            guard let (handler, context) = socket.current else { return }
            handler.write(fault, context: context)
            socket.record(.out, .fault, data: fault.rawValue, code: Int(fault.expectedCloseCode))
        }
    }

    /// Starts the close handshake with `code` and `reason`; TCP closes once the client answers
    /// (or after the server's close timeout).
    /// - Throws: ``ScriptedWebSocketError`` for a code a close frame may not carry (1005,
    ///   1006, 1015, or outside 1000...4999), or when a close already began.
    public func close(code: UInt16 = 1000, reason: String = "") throws(ScriptedWebSocketError) {
        guard (1000...4999).contains(code), ![1004, 1005, 1006, 1015].contains(code) else {
            throw ScriptedWebSocketError("\(code) cannot be sent in a close frame (RFC 6455 section 7.4)")
        }
        guard reason.utf8.count <= 123 else { throw ScriptedWebSocketError("a close reason is at most 123 bytes (got \(reason.utf8.count))") }
        try take(.closedByServer, "close")
        onLoop { socket in
            guard let (handler, context) = socket.current else { return }
            handler.close(code: WebSocketCloseCode(code), reason: reason, context: context)
        }
    }

    /// Closes TCP at once (over HTTP/2, resets the stream), with no close frame, after what was
    /// sent before: the client sees the connection lost.
    public func drop() throws(ScriptedWebSocketError) {
        try take(.closedByServer, "drop")
        onLoop { socket in
            guard let (handler, context) = socket.current else { return }
            socket.record(.out, .drop)
            handler.drop(context: context)
        }
    }

    /// Runs `actions` in order, waiting where one says to; an action that cannot run (a send
    /// after the close) ends the run.
    public func run(_ actions: [ScriptAction]) {
        run(actions[...])
    }

    private func run(_ actions: ArraySlice<ScriptAction>) {
        var rest = actions
        while let action = rest.popFirst() {
            do {
                switch action {
                case .send(let text): try send(text)
                case .sendBinary(let data): try send(binary: data)
                case .ping(let payload): try ping(payload)
                case .close(let code, let reason): try close(code: code, reason: reason)
                case .drop: try drop()
                case .answerPings(let answers): answerPings = answers
                case .fragment(let text, let frames): try send(text, frames: frames)
                case .fault(let fault): try send(fault)
                case .delay(let duration):
                    let remaining = rest
                    eventLoop.scheduleTask(in: TimeAmount(duration)) { self.run(remaining) }
                    return
                }
            } catch {
                return
            }
        }
    }

    /// `text` cut to the 123 bytes a close frame's reason may hold, at a character's boundary
    /// (text from a peer, such as an id, may be longer, or cut inside a character).
    static func closeReason(_ text: String) -> String {
        guard text.utf8.count > 123 else { return text }
        var reason = ""
        for character in text {
            guard reason.utf8.count + character.utf8.count <= 123 else { break }
            reason.append(character)
        }
        return reason
    }

    /// Runs `body` on the connection's event loop after `delay`, unless the connection is closed
    /// by then (a protocol preset's timers: pings, timeouts, paced messages).
    func after(_ delay: Duration, _ body: @escaping @Sendable () -> Void) {
        eventLoop.scheduleTask(in: TimeAmount(delay)) {
            guard !self.isClosed else { return }
            body()
        }
    }

    // MARK: Serving

    /// The handler and context, while served.
    private var current: (EventLoopWebSocketHandler, ChannelHandlerContext)? {
        guard let handler = served.value.handler, let context = served.value.context else { return nil }
        return (handler, context)
    }

    func attach(_ handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        served.value.handler = handler
        served.value.context = context
    }

    func detach() {
        served.value = Served()
    }

    private func checkOpen(_ what: String) throws(ScriptedWebSocketError) {
        let phase = state.withLockedValue { $0.phase }
        guard phase == .open else { throw ScriptedWebSocketError.closed(what, phase) }
    }

    private func take(_ phase: Phase, _ what: String) throws(ScriptedWebSocketError) {
        let previous: Phase = state.withLockedValue { state in
            let previous = state.phase
            if previous == .open { state.phase = phase }
            return previous
        }
        guard previous == .open else { throw ScriptedWebSocketError.closed(what, previous) }
    }

    /// The client closed or left: nothing more can be sent.
    func closedByClient() {
        state.withLockedValue { state in
            if state.phase == .open { state.phase = .closedByClient }
        }
    }

    /// The server's engine began a close of its own (a protocol error, a shutdown).
    func closedByServer() {
        state.withLockedValue { state in
            if state.phase == .open { state.phase = .closedByServer }
        }
    }

    func received() -> Int {
        state.withLockedValue { state in
            state.received += 1
            return state.received
        }
    }

    /// Runs `body` on the event loop: now when called there, else soon, in order; then flushes.
    private func onLoop(_ body: @escaping @Sendable (ScriptedWebSocket) -> Void) {
        if eventLoop.inEventLoop {
            body(self)
            flush()
        } else {
            eventLoop.execute {
                body(self)
                self.flush()
            }
        }
    }

    private func flush() {
        guard let (handler, context) = current else { return }
        handler.flush(context: context)
    }

    /// A message to send, through the faults: delayed, then reordered, duplicated, fragmented,
    /// and the connection dropped after the Nth.
    private func emit(_ message: Outgoing) {
        if let delay = faults.delaySends, delay > .zero {
            eventLoop.scheduleTask(in: TimeAmount(delay)) {
                self.emitNow(message)
                self.flush()
            }
        } else {
            emitNow(message)
        }
    }

    private func emitNow(_ message: Outgoing) {
        guard let (handler, context) = current, handler.canSend else { return }
        if faults.reorderSends {
            guard let held = served.value.heldBack else {
                served.value.heldBack = message
                return
            }
            served.value.heldBack = nil
            write(message, handler: handler, context: context)
            write(held, handler: handler, context: context)
        } else {
            write(message, handler: handler, context: context)
        }
    }

    private func write(_ message: Outgoing, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        for _ in 0..<(faults.duplicateSends ? 2 : 1) {
            guard handler.canSend else { return }
            if let frames = faults.fragmentSends, frames > 1 {
                writeFragments(message, frames: frames, handler: handler, context: context)
            } else {
                switch message {
                case .text(let text):
                    handler.send(context.channel.allocator.buffer(string: text), opcode: .text, context: context)
                    record(.out, .text, data: text)
                case .binary(let data):
                    handler.send(context.channel.allocator.buffer(bytes: data), opcode: .binary, context: context)
                    record(.out, .binary, data: data.base64EncodedString())
                }
            }
            served.value.sent += 1
            if let limit = faults.dropAfterSending, served.value.sent >= limit {
                state.withLockedValue { $0.phase = .closedByServer }
                record(.out, .drop)
                handler.drop(context: context)
                return
            }
        }
    }

    /// Writes a message in `frames` frames of about equal size (never compressed).
    private func writeFragments(_ message: Outgoing, frames: Int, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        let (bytes, opcode, data): ([UInt8], WebSocketOpcode, String) =
            switch message {
            case .text(let text): (Array(text.utf8), .text, text)
            case .binary(let binary): (Array(binary), .binary, binary.base64EncodedString())
            }
        handler.writeFragments(bytes, opcode: opcode, frames: frames, context: context)
        record(.out, opcode == .text ? .text : .binary, data: data)
    }

    func record(
        _ direction: ScriptJournal.Entry.Direction, _ kind: ScriptJournal.Entry.Kind, data: String? = nil, code: Int? = nil, reason: String? = nil
    ) {
        journal.append(.init(connection: connection, path: request.path, direction: direction, kind: kind, data: data, code: code, reason: reason))
    }
}

/// A scripted WebSocket was asked something it cannot do: send after a close, close twice, a
/// close code no close frame may carry.
public struct ScriptedWebSocketError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong.
    public var message: String

    init(_ message: String) {
        self.message = message
    }

    static func closed(_ what: String, _ phase: ScriptedWebSocket.Phase) -> ScriptedWebSocketError {
        switch phase {
        case .open: ScriptedWebSocketError("cannot \(what)")
        case .closedByServer: ScriptedWebSocketError("cannot \(what): the route already closed or dropped this connection")
        case .closedByClient: ScriptedWebSocketError("cannot \(what): the client closed this connection")
        }
    }

    public var description: String { message }
}

/// Serves one scripted connection on its event loop (``EventLoopWebSocketHandler``): hands each
/// message to the route's handler and journals what happens.
final class ScriptedWebSocketService: EventLoopWebSocketService {
    private let socket: ScriptedWebSocket
    private let route: WebSocketRouteHandler
    /// The route's name in metrics and fault scopes: its pattern (`echo` for /echo's faults).
    private let name: String
    private var sawClose = false

    init(socket: ScriptedWebSocket, route: WebSocketRouteHandler, name: String) {
        self.socket = socket
        self.route = route
        self.name = name
    }

    var connectionInfo: ConnectionInfo { .init(kind: .webSocket, route: name) }

    func start(handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        socket.attach(handler, context: context)
        socket.journalOpen()
        call { try route.onConnect(socket) }
    }

    func receive(_ message: consuming ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        let scripted: ScriptedMessage
        if opcode == .text {
            let text = String(buffer: message)
            socket.record(.in, .text, data: text)
            scripted = .text(text)
        } else {
            let data = Data(message.readableBytesView)
            socket.record(.in, .binary, data: data.base64EncodedString())
            scripted = .binary(data)
        }
        _ = socket.received()
        call { try route.onMessage(scripted, socket) }
    }

    func pinged(_ payload: ByteBuffer) -> Bool {
        socket.record(.in, .ping, data: String(buffer: payload))
        let answers = socket.answerPings
        if answers { socket.record(.out, .pong, data: String(buffer: payload)) }
        return answers
    }

    func ponged(_ payload: ByteBuffer) {
        socket.record(.in, .pong, data: String(buffer: payload))
    }

    func peerClosed(code: WebSocketCloseCode?, reason: String) {
        sawClose = true
        socket.closedByClient()
        socket.record(.in, .close, code: code.map { Int($0.rawValue) }, reason: reason)
    }

    func closing() {
        socket.closedByServer()
    }

    func sentClose(code: WebSocketCloseCode?, reason: String) {
        socket.record(.out, .close, code: code.map { Int($0.rawValue) }, reason: reason)
    }

    func stall(for duration: Duration) {}

    func closeTimedOut() {
        socket.record(.in, .timeout)
    }

    func end() {
        let phase = socket.isClosed
        if !sawClose, !phase {
            // Gone with no close frame from the client and none begun here: the client left.
            socket.record(.in, .drop)
        }
        socket.closedByClient()
        socket.detach()
        route.onEnd(socket)
    }

    /// Runs a handler; one that throws closes the connection with 1011, its error journaled.
    private func call(_ body: () throws -> Void) {
        do {
            try body()
        } catch {
            socket.record(.out, .error, data: "\(error)")
            try? socket.close(code: 1011, reason: ScriptedWebSocket.closeReason(ScriptJournal.excerpt("\(error)")))
        }
    }
}

/// A scripted WebSocket route's handlers.
struct WebSocketRouteHandler: Sendable {
    var subprotocols: [String]
    var faults: WebSocketFaults
    var answerPings: Bool
    var accept: @Sendable (ScriptedRequest) -> UpgradeDecision
    var onConnect: @Sendable (ScriptedWebSocket) throws -> Void
    var onMessage: @Sendable (ScriptedMessage, ScriptedWebSocket) throws -> Void
    /// The connection is gone (a protocol preset's cleanup, an MQTT last will).
    var onEnd: @Sendable (ScriptedWebSocket) -> Void = { _ in }
}

extension ScriptedWebSocket {
    /// Journals the connection's opening, with its request.
    func journalOpen() {
        journal.append(.init(connection: connection, path: request.path, direction: .in, kind: .open, request: request))
    }
}
