import DuplexSchema
import NIOCore
import NIOWebSocket

/// What an ``EventLoopWebSocketHandler`` serves: `/echo` (``EchoService``) or a chat member
/// (``ChatMemberService``). Called on the connection's event loop only.
protocol EventLoopWebSocketService: AnyObject {
    /// How the connection is listed in the server's ``ConnectionRegistry``.
    var connectionInfo: ConnectionInfo { get }
    /// The connection is upgraded and registered.
    func start(handler: EventLoopWebSocketHandler, context: ChannelHandlerContext)
    /// A whole message arrived (reassembled, inflated, and for text checked as UTF-8).
    func receive(_ message: ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext)
    /// Nothing may be written for `duration` (a fault): the handler stops reading meanwhile.
    func stall(for duration: Duration)
    /// The server sends a close frame now: nothing the service holds may follow it.
    func closing()
    /// The connection is gone.
    func end()
}

/// A WebSocket connection served on its event loop: no task, no stream, no actor per connection.
///
/// It sits after swift-nio's `WebSocketFrameDecoder` and answers its refusals itself (a frame
/// over the size limit with 1009, a malformed control frame with 1002): NIO's
/// `WebSocketProtocolErrorHandler` is left out, since it would send a second close frame after
/// one this handler sent. It does
/// what RFC 6455 asks of a server, and hands each whole message to its service:
/// - fragments are reassembled;
/// - a message over `maxMessageBytes` gets 1009, invalid UTF-8 in a text message 1007 (for an
///   uncompressed fragmented message, at the first fragment that makes it invalid), reserved
///   bits, a reserved opcode, a continuation with nothing to continue or a new message inside a
///   fragmented one 1002;
/// - pings are answered with pongs; a client's close is answered (1000, or 1002 for a bad code)
///   and the connection closed;
/// - the registry's commands (close, drop, stall) arrive through ``deliver(_:context:)``; a close
///   the server starts waits `closeTimeout` for the client's answer, then closes TCP;
/// - backpressure: while the channel is not writable (the client does not read), the handler
///   stops reading, so the client's sends are held back by TCP, not buffered here;
/// - permessage-deflate, when negotiated (``DeflateContext``): a message whose first frame has
///   RSV1 is inflated within `maxMessageBytes` (1009 past it, 1007 for bytes that do not inflate),
///   and what ``send(_:opcode:context:)`` sends of at least the threshold goes compressed. The
///   zlib streams are the event loop's, shared; the connection keeps only its two windows.
///
/// Writes are flushed once per read batch, so pipelined messages share a system call.
final class EventLoopWebSocketHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// The limits and intervals the handler applies.
    struct Configuration: Sendable {
        var maxMessageBytes: Int
        var closeTimeout: Duration
    }

    private let configuration: Configuration
    private let registry: ConnectionRegistry
    private let service: any EventLoopWebSocketService
    private var registration: UInt64?
    private var state = WebSocketCloseState()
    private var deflate: DeflateContext?
    /// The opcode and bytes of a fragmented message being reassembled, and whether it is
    /// compressed.
    private var fragments: (opcode: WebSocketOpcode, buffer: ByteBuffer, compressed: Bool)?
    /// While an uncompressed text message arrives in fragments: its UTF-8 so far, checked as
    /// each fragment comes, so invalid text is refused at once (RFC 6455 section 8.1).
    private var fragmentText: UTF8Validator?
    private var needsFlush = false
    /// Whether a read batch has ended here (`channelReadComplete`): from then on, every read
    /// comes from the socket and is followed by one, which flushes what it wrote.
    private var sawReadComplete = false
    private var readPending = false
    private var stalledUntil: NIODeadline?
    private var closeDeadline: Scheduled<Void>?
    /// Whether the service waits on something (``hold()``): messages are kept, not handed over.
    private var isHeld = false
    /// The whole messages that arrived while the service was held, in order: at most what one
    /// read brought, since the handler reads no more meanwhile.
    private var held = CircularBuffer<(message: ByteBuffer, opcode: WebSocketOpcode)>()

    init(configuration: Configuration, registry: ConnectionRegistry, service: any EventLoopWebSocketService, deflate: DeflateContext? = nil) {
        self.configuration = configuration
        self.registry = registry
        self.service = service
        self.deflate = deflate
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loop = context.eventLoop
        let bound = NIOLoopBound((self, context), eventLoop: loop)
        registration = registry.register(service.connectionInfo) { command in
            loop.execute {
                let (handler, context) = bound.value
                handler.deliver(command, context: context)
            }
        }
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
    func hold() {
        isHeld = true
    }

    /// The service can take messages again: those kept meanwhile are handed over, in order
    /// (until it holds again), then reading resumes.
    func release(context: ChannelHandlerContext) {
        isHeld = false
        while !isHeld, state.isOpen, let next = held.popFirst() {
            service.receive(next.message, opcode: next.opcode, handler: self, context: context)
        }
        guard !isHeld, context.channel.isActive else { return }
        flushIfNeeded(context: context)
        resumeReading(context: context)
    }

    /// The close handshake began: nothing kept is handed over, and reading resumes for the
    /// client's close frame.
    private func dropHeld(context: ChannelHandlerContext) {
        held.removeAll()
        guard isHeld else { return }
        isHeld = false
        resumeReading(context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        finish()
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish()
        closeDeadline?.cancel()
        context.fireChannelInactive()
    }

    /// Unregisters and tells the service, once.
    private func finish() {
        if let registration {
            registry.remove(registration)
            self.registration = nil
            service.end()
        }
    }

    // MARK: Reading

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard state.isOpen else {
            // Closing: only the client's close matters now.
            if frame.opcode == .connectionClose { context.close(promise: nil) }
            return
        }
        // RFC 6455 section 5.1: a client masks every frame, those sent with the handshake too.
        guard frame.maskKey != nil else {
            return fail(.protocolError, "client frames must be masked", context: context)
        }
        guard frame.rsv2 == false, frame.rsv3 == false else {
            return fail(.protocolError, "reserved bits set without an extension", context: context)
        }
        // RSV1 marks a compressed message, on its first frame only (RFC 7692 section 6).
        if frame.rsv1 {
            guard deflate != nil else {
                return fail(.protocolError, "reserved bits set without an extension", context: context)
            }
            guard frame.opcode == .text || frame.opcode == .binary else {
                return fail(.protocolError, "RSV1 on a frame that does not begin a message", context: context)
            }
        }
        switch frame.opcode {
        case .text, .binary:
            guard fragments == nil else {
                return fail(.protocolError, "a new message inside a fragmented one", context: context)
            }
            if frame.fin {
                deliver(message: frame.unmaskedData, opcode: frame.opcode, compressed: frame.rsv1, context: context)
            } else {
                let data = frame.unmaskedData
                if frame.opcode == .text, !frame.rsv1 {
                    var text = UTF8Validator()
                    guard text.feed(data.readableBytesView) else {
                        return fail(.dataInconsistentWithMessage, "invalid UTF-8", context: context)
                    }
                    fragmentText = text
                }
                fragments = (frame.opcode, data, frame.rsv1)
                checkFragmentSize(context: context)
            }
        case .continuation:
            guard case (let opcode, var buffer, let compressed)? = fragments else {
                return fail(.protocolError, "a continuation frame with no message to continue", context: context)
            }
            fragments = nil
            var data = frame.unmaskedData
            if var text = fragmentText {
                fragmentText = nil
                guard text.feed(data.readableBytesView), !frame.fin || text.isComplete else {
                    return fail(.dataInconsistentWithMessage, "invalid UTF-8", context: context)
                }
                if !frame.fin { fragmentText = text }
            }
            buffer.writeBuffer(&data)
            if frame.fin {
                deliver(message: buffer, opcode: opcode, compressed: compressed, context: context)
            } else {
                fragments = (opcode, buffer, compressed)
                checkFragmentSize(context: context)
            }
        case .ping:
            write(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData), context: context)
        case .pong:
            break
        case .connectionClose:
            answerClose(frame.unmaskedData, context: context)
        default:
            fail(.protocolError, "a reserved opcode", context: context)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // The server allows half-closure: a client that shuts its side down is done.
        if let event = event as? ChannelEvent, event == .inputClosed {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// A frame NIO's decoder refused (too long for the frame limit: 1009; a fragmented or long
    /// control frame: 1002) fails the connection, unless it is closing already: then TCP is
    /// closed, and no second close frame goes out.
    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let error = error as? NIOWebSocketError else { return context.fireErrorCaught(error) }
        if state.isOpen {
            switch error {
            case .invalidFrameLength: fail(.messageTooLarge, "a frame longer than the limit", context: context)
            default: fail(.protocolError, "a fragmented or long control frame", context: context)
            }
        } else {
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        sawReadComplete = true
        flushIfNeeded(context: context)
        context.fireChannelReadComplete()
    }

    private func checkFragmentSize(context: ChannelHandlerContext) {
        if let fragments, fragments.buffer.readableBytes > configuration.maxMessageBytes {
            fail(.messageTooLarge, "message too large", context: context)
        }
    }

    private func deliver(message: ByteBuffer, opcode: WebSocketOpcode, compressed: Bool, context: ChannelHandlerContext) {
        guard message.readableBytes <= configuration.maxMessageBytes else {
            return fail(.messageTooLarge, "message too large", context: context)
        }
        var message = message
        if compressed, deflate != nil {
            do {
                message = try deflate!.inflate(message, maxBytes: configuration.maxMessageBytes, allocator: context.channel.allocator)
            } catch .tooLarge {
                return fail(.messageTooLarge, "message too large once inflated", context: context)
            } catch {
                return fail(.dataInconsistentWithMessage, "the compressed message does not inflate", context: context)
            }
        }
        if opcode == .text, !message.readableBytesView.isValidUTF8 {
            return fail(.dataInconsistentWithMessage, "invalid UTF-8", context: context)
        }
        if isHeld {
            held.append((message, opcode))
        } else {
            service.receive(message, opcode: opcode, handler: self, context: context)
        }
    }

    /// Sends a message, compressed when permessage-deflate was agreed and it reaches the
    /// threshold; flushed with the read batch. Nothing is sent once the connection is closing.
    func send(_ message: ByteBuffer, opcode: WebSocketOpcode, context: ChannelHandlerContext) {
        guard state.isOpen else { return }
        if deflate != nil {
            let (payload, compressed) = deflate!.deflate(message, allocator: context.channel.allocator)
            write(WebSocketFrame(fin: true, rsv1: compressed, opcode: opcode, data: payload), context: context)
        } else {
            write(WebSocketFrame(fin: true, opcode: opcode, data: message), context: context)
        }
    }

    /// Starts the close handshake with `code` (the reason cut to fit a control frame), and
    /// closes TCP if the client has not answered within `closeTimeout`.
    func close(code: WebSocketErrorCode, reason: String, context: ChannelHandlerContext) {
        guard state.isOpen else { return }
        fragments = nil
        fragmentText = nil
        state.closeSent()
        service.closing()
        dropHeld(context: context)
        context.writeAndFlush(wrapOutboundOut(closeFrame(code, reason, allocator: context.channel.allocator)), promise: nil)
        let timeout = TimeAmount(configuration.closeTimeout)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        closeDeadline = context.eventLoop.scheduleTask(in: timeout) { bound.value.close(promise: nil) }
    }

    /// The client's close: answered with 1000, or 1002 for a malformed one, then TCP is closed.
    private func answerClose(_ payload: ByteBuffer, context: ChannelHandlerContext) {
        state.closeReceived()
        service.closing()
        held.removeAll()
        let code = WebSocketCloseState.answer(toClose: payload)
        var data = context.channel.allocator.buffer(capacity: 2)
        data.write(webSocketErrorCode: code)
        closeAfter(context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data))), context: context)
    }

    /// Sends a close frame for a violation and closes TCP once it is written.
    private func fail(_ code: WebSocketErrorCode, _ reason: String, context: ChannelHandlerContext) {
        guard state.isOpen else { return }
        fragments = nil
        fragmentText = nil
        state.closeSent()
        service.closing()
        closeAfter(context.writeAndFlush(wrapOutboundOut(closeFrame(code, reason, allocator: context.channel.allocator))), context: context)
    }

    /// Closes TCP once `write` completes: the server closes first, as RFC 6455 section 7.1.1 asks.
    private func closeAfter(_ write: EventLoopFuture<Void>, context: ChannelHandlerContext) {
        let context = NIOLoopBound(context, eventLoop: context.eventLoop)
        write.whenComplete { _ in context.value.close(promise: nil) }
    }

    /// A close frame; the reason is cut, at a character boundary, to the 123 bytes a control
    /// frame has room for (RFC 6455 section 5.5).
    private func closeFrame(_ code: WebSocketErrorCode, _ reason: String, allocator: ByteBufferAllocator) -> WebSocketFrame {
        var length = 0
        let reason = reason.prefix { character in
            length += character.utf8.count
            return length <= 123
        }
        var data = allocator.buffer(capacity: 2 + reason.utf8.count)
        data.write(webSocketErrorCode: code)
        data.writeSubstring(reason)
        return WebSocketFrame(fin: true, opcode: .connectionClose, data: data)
    }

    private func write(_ frame: WebSocketFrame, context: ChannelHandlerContext) {
        context.write(wrapOutboundOut(frame), promise: nil)
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

    private func flushIfNeeded(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
    }

    // MARK: Backpressure and stalls

    func read(context: ChannelHandlerContext) {
        if context.channel.isWritable, stalledUntil == nil, !isHeld {
            context.read()
        } else {
            readPending = true
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { resumeReading(context: context) }
        context.fireChannelWritabilityChanged()
    }

    private func resumeReading(context: ChannelHandlerContext) {
        guard readPending, stalledUntil == nil, !isHeld, context.channel.isWritable else { return }
        readPending = false
        context.read()
    }

    // MARK: Commands

    /// Carries out one of the registry's commands; on the event loop.
    func deliver(_ command: ConnectionCommand, context: ChannelHandlerContext) {
        switch command {
        case .close(let code, let reason):
            close(code: code.nio, reason: reason, context: context)
        case .drop:
            context.close(promise: nil)
        case .stall(let duration):
            service.stall(for: duration)
            let until = NIODeadline.now() + TimeAmount(duration)
            stalledUntil = until
            // No reads at all meanwhile, not even one the channel would issue by itself.
            try? context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: false)
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(deadline: until) {
                let (handler, context) = bound.value
                guard handler.stalledUntil == until else { return }
                handler.stalledUntil = nil
                try? context.channel.syncOptions?.setOption(ChannelOptions.autoRead, value: true)
                handler.readPending = true
                handler.resumeReading(context: context)
            }
        }
    }
}

/// Whether an event-loop WebSocket connection is open, or which side began to close it.
struct WebSocketCloseState: Sendable, Equatable {
    enum Phase: Sendable, Equatable {
        case open
        /// The server sent a close frame and waits for the client's.
        case closeSent
        /// The client's close arrived and was answered.
        case closeReceived
    }

    private(set) var phase: Phase = .open

    var isOpen: Bool { phase == .open }

    mutating func closeSent() {
        if phase == .open { phase = .closeSent }
    }

    mutating func closeReceived() {
        phase = .closeReceived
    }

    /// The code that answers a client's close frame (RFC 6455 sections 5.5.1 and 7.4): 1000 for
    /// an empty payload or a valid code with a UTF-8 reason; 1002 for a one-byte payload, a
    /// code no endpoint may send, or a reason that is not UTF-8.
    static func answer(toClose payload: ByteBuffer) -> WebSocketErrorCode {
        if payload.readableBytes == 0 { return .normalClosure }
        var payload = payload
        guard let raw = payload.readInteger(as: UInt16.self) else { return .protocolError }
        guard payload.readableBytesView.isValidUTF8 else { return .protocolError }
        switch raw {
        case 1000...1003, 1007...1014, 3000...4999: return .normalClosure
        default: return .protocolError
        }
    }
}

extension ByteBufferView {
    /// Whether these bytes are well-formed UTF-8.
    var isValidUTF8: Bool {
        // ASCII, the usual case, needs no decoder.
        if allSatisfy({ $0 < 0x80 }) { return true }
        return String(validating: self, as: UTF8.self) != nil
    }
}
