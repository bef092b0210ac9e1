import Atomics
import DequeModule
package import DuplexSchema
package import DuplexWire
import Logging
package import NIOCore
package import NIOWebSocket

/// What an ``EventLoopWebSocketHandler`` serves: `/echo` (``EchoService``) or a chat member
/// (``ChatMemberService``). Called on the connection's event loop only.
package protocol EventLoopWebSocketService: AnyObject {
    /// How the connection is listed in the server's ``ConnectionRegistry``.
    var connectionInfo: ConnectionInfo { get }
    /// The connection is upgraded and registered.
    func start(handler: EventLoopWebSocketHandler, context: ChannelHandlerContext)
    /// A whole message arrived (reassembled, inflated, and for text checked as UTF-8).
    func receive(_ message: consuming ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext)
    /// Nothing may be written for `duration` (a fault): the handler stops reading meanwhile.
    func stall(for duration: Duration)
    /// The server sends a close frame now: nothing the service holds may follow it.
    func closing()
    /// The client started the close handshake with `code` (nil: none) and `reason`; the
    /// handler answers it.
    func peerClosed(code: WebSocketCloseCode?, reason: String)
    /// The channel is writable again: the client read what was waiting for it.
    func writable()
    /// The client sent a ping: whether the handler answers it with a pong.
    func pinged(_ payload: ByteBuffer) -> Bool
    /// The client sent a pong.
    func ponged(_ payload: ByteBuffer)
    /// The server wrote a close frame with `code` (nil: none) and `reason`: its own, an answer
    /// to the client's, or a failure's (1002, 1007, 1009).
    func sentClose(code: WebSocketCloseCode?, reason: String)
    /// The client did not answer the server's close frame within the close timeout: TCP is
    /// closed now.
    func closeTimedOut()
    /// A message the service held back (``EventLoopWebSocketHandler/hold()``) will not be
    /// served: a close began. It arrived before the client's close frame, if the client closed.
    func discarded(_ message: ByteBuffer, opcode: WebSocketOpcode)
    /// The connection is gone.
    func end()
}

extension EventLoopWebSocketService {
    package func peerClosed(code: WebSocketCloseCode?, reason: String) {}
    package func writable() {}
    package func pinged(_ payload: ByteBuffer) -> Bool { true }
    package func ponged(_ payload: ByteBuffer) {}
    package func sentClose(code: WebSocketCloseCode?, reason: String) {}
    package func discarded(_ message: ByteBuffer, opcode: WebSocketOpcode) {}
    package func closeTimedOut() {}
}

/// A WebSocket connection served on its event loop: no task, no stream, no actor per connection.
///
/// It reads the connection's bytes itself: DuplexWire's `WebSocketFrameParser` takes the frames
/// out of them and its `WebSocketEngine`, as the server, applies RFC 6455 and 7692 (masking,
/// fragments, UTF-8, control frames, the close handshake, the message limit; 1002, 1007 or 1009
/// for what breaks them). This handler carries out what the engine answers, handing each whole
/// message to its service, and encodes what it sends (`WebSocketFrameBytes`): one buffer per
/// frame, and for an echo the header goes in front of the payload in the buffer it was unmasked
/// into. The frame decoder swift-nio's upgrade installs is taken out, and its encoder, which
/// cannot be, is written past. Besides:
/// - the registry's commands (close, drop, stall) arrive through ``deliver(_:context:)``; a close
///   the server starts waits `closeTimeout` for the client's answer, then closes TCP; after any
///   close frame the server sent or answered, TCP is closed as soon as it is written (the server
///   closes first, RFC 6455 section 7.1.1);
/// - backpressure: while the channel is not writable (the client does not read), the handler
///   stops reading, so the client's sends are held back by TCP, not buffered here;
/// - permessage-deflate, when negotiated (``DeflateContext``): a compressed message is inflated
///   within `maxMessageBytes`, and what ``send(_:opcode:context:)`` sends of at least the
///   threshold goes compressed. The zlib streams are the event loop's, shared; the connection
///   keeps only its two windows.
///
/// Writes are flushed once per read batch, so pipelined messages share a system call, and the
/// messages counted meanwhile (``MessageTally``) are added to the route's metrics then too.
package final class EventLoopWebSocketHandler: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias OutboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer

    /// The limits and intervals the handler applies.
    package struct Configuration: Sendable {
        package var maxMessageBytes: Int
        package var closeTimeout: Duration

        /// A message of at most `maxMessageBytes`; a close the server starts waits `closeTimeout`.
        package init(maxMessageBytes: Int, closeTimeout: Duration) {
            self.maxMessageBytes = maxMessageBytes
            self.closeTimeout = closeTimeout
        }
    }

    private let configuration: Configuration
    private let registry: ConnectionRegistry
    private let service: any EventLoopWebSocketService
    private let metrics: ServerMetrics
    private let routeMetrics: ServerMetrics.Route
    /// Messages read and sent since they were last added to `routeMetrics`.
    private var tally = MessageTally()
    /// The client's W3C trace context, for the connection's log lines.
    private let trace: ConnectionTrace?
    private var registration: UInt64?
    /// Where frames are written (`WebSocketPipeline.wire(for:)`): past NIO's encoder.
    private var wire: ChannelHandlerContext?
    private var engine: WebSocketEngine
    private var parser: WebSocketFrameParser
    /// Whether frames are being taken out of the bytes read: a read that arrives meanwhile (from
    /// something the service did) only adds its bytes.
    private var parsing = false
    private var deflate: DeflateContext?
    private var needsFlush = false
    /// Whether a read batch has ended here (`channelReadComplete`): from then on, every read
    /// comes from the socket and is followed by one, which flushes what it wrote.
    private var sawReadComplete = false
    private var readPending = false
    private var stalledUntil: NIODeadline?
    /// Set by the thread that asks for a stall, before the command reaches the event loop: bytes
    /// the loop reads in between (its I/O comes before its tasks) are kept unparsed too, so a
    /// stall is in effect once ``ConnectionRegistry/send(_:matching:)`` returns.
    private let stallRequested = ManagedAtomic(false)
    private var closeDeadline: Scheduled<Void>?
    /// Whether the service waits on something (``hold()``): messages are kept, not handed over.
    private var isHeld = false
    /// The whole messages that arrived while the service was held, in order: at most what one
    /// read brought, since the handler reads no more meanwhile.
    /// (A `Deque` allocates nothing until it holds something: swift-nio's `CircularBuffer` would
    /// allocate room for 16 up front, half a KiB for every connection.)
    private var held = Deque<(message: ByteBuffer, opcode: WebSocketOpcode)>()

    package init(
        configuration: Configuration,
        registry: ConnectionRegistry,
        service: any EventLoopWebSocketService,
        metrics: ServerMetrics,
        trace: ConnectionTrace? = nil,
        deflate: DeflateContext? = nil
    ) {
        self.trace = trace
        self.configuration = configuration
        self.registry = registry
        self.service = service
        self.metrics = metrics
        self.routeMetrics = metrics.route(service.connectionInfo.route)
        self.deflate = deflate
        self.engine = WebSocketEngine(role: .server, maxMessageBytes: configuration.maxMessageBytes, compressionNegotiated: deflate != nil)
        self.parser = WebSocketFrameParser(maxFrameSize: configuration.maxMessageBytes)
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        wire = WebSocketPipeline.wire(for: context)
        let loop = context.eventLoop
        let bound = NIOLoopBound((self, context), eventLoop: loop)
        var info = service.connectionInfo
        info.overHTTP2 = ConnectionInfo.isHTTP2Stream(context.channel)
        let stallRequested = self.stallRequested
        registration = registry.register(info) { command in
            if case .stall = command { stallRequested.store(true, ordering: .releasing) }
            loop.execute {
                let (handler, context) = bound.value
                handler.deliver(command, context: context)
            }
        }
        registry.logger.debug("WebSocket opened", metadata: trace.metadata(route: service.connectionInfo.route))
        service.start(handler: self, context: context)
        // A read asked for while the upgrade was under way may have been held back by the HTTP
        // upgrade handler: ask again, or a quiet connection would never be read.
        if context.channel.isActive {
            if isHeld { readPending = true } else { context.read() }
        }
    }

    /// The service waits on something before it can take the next message (a room store that
    /// answers later): messages that arrive meanwhile are kept, in order, and no more are read
    /// until ``release(context:)``.
    package func hold() {
        isHeld = true
    }

    /// The service can take messages again: those kept meanwhile are handed over, in order
    /// (until it holds again), then reading resumes.
    package func release(context: ChannelHandlerContext) {
        isHeld = false
        while !isHeld, engine.canSend, let next = held.popFirst() {
            service.receive(next.message, opcode: next.opcode, handler: self, context: context)
        }
        guard !isHeld, context.channel.isActive else { return }
        flushIfNeeded(context: context)
        resumeReading(context: context)
    }

    /// The close handshake began: nothing kept is handed over, and reading resumes for the
    /// client's close frame.
    private func dropHeld(context: ChannelHandlerContext) {
        while let next = held.popFirst() { service.discarded(next.message, opcode: next.opcode) }
        guard isHeld else { return }
        isHeld = false
        resumeReading(context: context)
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        finish()
        wire = nil
        parser.reset()
    }

    package func channelInactive(context: ChannelHandlerContext) {
        finish()
        parser.reset()
        closeDeadline?.cancel()
        context.fireChannelInactive()
    }

    /// Unregisters and tells the service, once.
    private func finish() {
        routeMetrics.add(&tally)
        if let registration {
            trace?.end()
            // Unregistered (and so counted closed in the metrics) before the line says so.
            registry.remove(registration)
            registry.logger.debug("WebSocket closed", metadata: trace.metadata(route: service.connectionInfo.route))
            self.registration = nil
            service.end()
        }
    }

    // MARK: Reading

    /// Takes the frames out of what was read (``WebSocketFrameParser``) and hands each to the
    /// engine, until the engine reads no more. A frame the parser refuses (longer than the
    /// message limit, a fragmented or long control frame) goes to the engine too, which fails the
    /// connection unless it is closing already. While stalled (a fault), bytes that still arrive
    /// are kept unparsed: no frame is answered, not even a ping, until the stall ends.
    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        parser.append(unwrapInboundIn(data))
        parseFrames(context: context)
    }

    private func parseFrames(context: ChannelHandlerContext) {
        guard !parsing, stalledUntil == nil, !stallRequested.load(ordering: .acquiring) else { return }
        parsing = true
        defer { parsing = false }
        while let action = engine.nextAction(from: &parser) {
            perform(action, context: context)
        }
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // The server allows half-closure: a client that shuts its side down is done.
        if let event = event as? ChannelEvent, event == .inputClosed {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    package func channelReadComplete(context: ChannelHandlerContext) {
        sawReadComplete = true
        flushIfNeeded(context: context)
        context.fireChannelReadComplete()
    }

    /// Carries out what the engine answered.
    private func perform(_ action: consuming WebSocketEngine.Action, context: ChannelHandlerContext) {
        switch consume action {
        case .none:
            break
        case .deliver(let opcode, let message):
            // Messages still in flight after the server's close frame are not served.
            guard engine.canSend else { return }
            tally.read(bytes: message.readableBytes)
            if isHeld {
                held.append((message, opcode))
            } else {
                service.receive(consume message, opcode: opcode, handler: self, context: context)
            }
        case .inflate(let opcode, let payload):
            guard deflate != nil else { return }
            let compressedSize = payload.readableBytes
            let inflated = engine.inflate(opcode, payload, with: &deflate!, allocator: context.channel.allocator)
            if case .deliver(_, let message) = inflated { tally.inflated(compressedSize, to: message.readableBytes) }
            perform(inflated, context: context)
        case .sendPong(let payload):
            if service.pinged(payload) { write(.pong, payload, context: context) }
        case .pongReceived(let payload):
            service.ponged(payload)
        case .replyToClose(let code, let reason):
            metrics.receivedClose(code)
            trace?.receivedClose(code)
            // What the client sent before its close frame, then the close.
            dropHeld(context: context)
            service.peerClosed(code: code, reason: reason)
            closing(context: context)
            closeAfter(writeClose(code, reason: "", context: context), context: context)
        case .closeHandshakeDone(let code, _):
            metrics.receivedClose(code)
            trace?.receivedClose(code)
            context.close(promise: nil)
        case .sendClose(let code, let reason):
            closing(context: context)
            writeClose(code, reason: reason, context: context)
            let timeout = TimeAmount(configuration.closeTimeout)
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            closeDeadline = context.eventLoop.scheduleTask(in: timeout) {
                let (handler, context) = bound.value
                handler.service.closeTimedOut()
                context.close(promise: nil)
            }
        case .fail(let code, let reason, let sendCloseFrame):
            // The server fails at once: nothing more is sent after its close frame.
            engine.failed()
            if sendCloseFrame {
                closing(context: context)
                closeAfter(writeClose(code, reason: reason, context: context), context: context)
            } else {
                context.close(promise: nil)
            }
        }
    }

    /// The server's close frame goes out now: the service sends nothing after it, and nothing
    /// kept is handed over; reading resumes for the client's close frame.
    private func closing(context: ChannelHandlerContext) {
        service.closing()
        dropHeld(context: context)
    }

    /// Sends a message, compressed when permessage-deflate was agreed and it reaches the
    /// threshold; flushed with the read batch. Nothing is sent once the connection is closing.
    package func send(_ message: consuming ByteBuffer, opcode: WebSocketOpcode, context: ChannelHandlerContext) {
        guard engine.canSend else { return }
        tally.sent(bytes: message.readableBytes)
        if deflate != nil {
            let size = message.readableBytes
            let (payload, compressed) = deflate!.deflate(message, allocator: context.channel.allocator)
            if compressed { tally.deflated(size, to: payload.readableBytes) }
            write(opcode, payload, rsv1: compressed, context: context)
        } else {
            write(opcode, consume message, context: context)
        }
    }

    /// Whether messages can still be sent: the server has sent no close frame.
    package var canSend: Bool { engine.canSend }

    /// Sends a ping; flushed with the read batch.
    package func ping(_ payload: ByteBuffer, context: ChannelHandlerContext) {
        guard engine.canSend else { return }
        write(.ping, payload, context: context)
    }

    /// Writes one frame as given, past every check: a fault a route asks for (a fragment, a
    /// reserved opcode, a control frame over 125 bytes, a masked frame, text that is not UTF-8).
    package func writeUnchecked(fin: Bool, opcode: WebSocketOpcode, payload: ByteBuffer, masked: Bool, context: ChannelHandlerContext) {
        guard engine.canSend else { return }
        let key: WebSocketMaskingKey? = masked ? WebSocketMaskingKey([0x37, 0xfa, 0x21, 0x3d]) : nil
        let (first, second) = WebSocketFrameBytes.encode(
            fin: fin, opcode: opcode, payload: payload, maskKey: key, allocator: context.channel.allocator)
        let wire = wire ?? context
        wire.write(wrapOutboundOut(first), promise: nil)
        if let second { wire.write(wrapOutboundOut(second), promise: nil) }
        needsFlush = true
    }

    /// Closes TCP at once, with no close frame (a reset where the platform allows), once what
    /// was written before is on its way: over HTTP/2, a stream reset at once would discard the
    /// DATA frames still buffered for it.
    package func drop(context: ChannelHandlerContext) {
        flushIfNeeded(context: context)
        let written = context.eventLoop.makePromise(of: Void.self)
        (wire ?? context).writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(capacity: 0)), promise: written)
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        written.futureResult.whenComplete { _ in
            let (handler, context) = bound.value
            handler.deliver(.drop, context: context)
        }
    }

    /// Starts the close handshake with `code` (the reason cut to fit a control frame), and
    /// closes TCP if the client has not answered within `closeTimeout`.
    package func close(code: WebSocketCloseCode, reason: String, context: ChannelHandlerContext) {
        perform(engine.close(code: code, reason: reason), context: context)
    }

    @discardableResult
    private func writeClose(_ code: WebSocketCloseCode?, reason: String, context: ChannelHandlerContext) -> EventLoopFuture<Void> {
        metrics.sentClose(code)
        trace?.sentClose(code)
        service.sentClose(code: code, reason: reason)
        registry.logger.debug(
            "close frame sent",
            metadata: trace.metadata(route: service.connectionInfo.route).merging([
                "code": "\(code.map { "\($0.rawValue)" } ?? "none")", "reason": "\(reason)",
            ]) { _, new in new }
        )
        let payload = WebSocketEngine.closePayload(code, reason: reason, allocator: context.channel.allocator)
        // A control frame's payload is at most 125 bytes: one buffer.
        let (frame, _) = WebSocketFrameBytes.encode(opcode: .connectionClose, payload: payload, allocator: context.channel.allocator)
        return (wire ?? context).writeAndFlush(wrapOutboundOut(frame))
    }

    /// Closes TCP once `write` completes: the server closes first, as RFC 6455 section 7.1.1 asks.
    private func closeAfter(_ write: EventLoopFuture<Void>, context: ChannelHandlerContext) {
        let context = NIOLoopBound(context, eventLoop: context.eventLoop)
        write.whenComplete { _ in context.value.close(promise: nil) }
    }

    /// Writes a final frame, encoded here (``WebSocketFrameBytes``): one buffer for the socket,
    /// the header in the room in front of a payload this handler unmasked, or two buffers for a
    /// large payload with no such room.
    private func write(_ opcode: WebSocketOpcode, _ payload: consuming ByteBuffer, rsv1: Bool = false, context: ChannelHandlerContext) {
        let (first, second) = WebSocketFrameBytes.encode(rsv1: rsv1, opcode: opcode, payload: consume payload, allocator: context.channel.allocator)
        let wire = wire ?? context
        wire.write(wrapOutboundOut(first), promise: nil)
        if let second { wire.write(wrapOutboundOut(second), promise: nil) }
        guard !needsFlush else { return }
        needsFlush = true
        // Frames are only written while a read is handled, and channelReadComplete flushes the
        // batch. Frames the upgrade replays (sent by the client before it read the 101) may come
        // with none, so until the first one a flush is also queued behind the current
        // event-loop turn: it finds nothing left to do when channelReadComplete came.
        guard !sawReadComplete else { return }
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = bound.value
            handler.flushIfNeeded(context: context)
        }
    }

    /// Flushes what was sent outside a read (from a timer, say): sends made while a read is
    /// handled are flushed with the read batch.
    package func flush(context: ChannelHandlerContext) {
        flushIfNeeded(context: context)
    }

    private func flushIfNeeded(context: ChannelHandlerContext) {
        routeMetrics.add(&tally)
        if needsFlush {
            needsFlush = false
            (wire ?? context).flush()
        }
    }

    // MARK: Backpressure and stalls

    package func read(context: ChannelHandlerContext) {
        if context.channel.isWritable, stalledUntil == nil, !isHeld {
            context.read()
        } else {
            readPending = true
        }
    }

    package func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            resumeReading(context: context)
            service.writable()
        }
        context.fireChannelWritabilityChanged()
    }

    private func resumeReading(context: ChannelHandlerContext) {
        guard readPending, stalledUntil == nil, !isHeld, context.channel.isWritable else { return }
        readPending = false
        context.read()
    }

    // MARK: Commands

    /// Carries out one of the registry's commands; on the event loop.
    package func deliver(_ command: ConnectionCommand, context: ChannelHandlerContext) {
        switch command {
        case .close(let code, let reason):
            close(code: code, reason: reason, context: context)
        case .drop:
            context.triggerUserOutboundEvent(AbruptClose(), promise: nil)
            context.close(promise: nil)
        case .stall(let duration):
            service.stall(for: duration)
            let until = context.eventLoop.now + TimeAmount(duration)
            stalledUntil = until
            stallRequested.store(false, ordering: .relaxed)
            // No reads at all meanwhile, not even one the channel would issue by itself.
            try? context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: false)
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(deadline: until) {
                let (handler, context) = bound.value
                guard handler.stalledUntil == until else { return }
                handler.stalledUntil = nil
                guard context.channel.isActive else { return }
                // What arrived during the stall is answered now, in order.
                handler.parseFrames(context: context)
                handler.flushIfNeeded(context: context)
                try? context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: true)
                handler.readPending = true
                handler.resumeReading(context: context)
            }
        }
    }
}
