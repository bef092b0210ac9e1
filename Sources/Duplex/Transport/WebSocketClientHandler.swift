import DuplexSchema
import DuplexWire
import Foundation
import NIOCore
import NIOWebSocket

/// The client's channel handler: it runs DuplexWire's `WebSocketEngine` (as the client) on the
/// event loop and carries out its actions, drains the ``Outbox`` while the channel is
/// writable, and holds back reads while the consumers are behind.
///
/// As the server's handler does, it reads the connection's bytes itself (`WebSocketFrameParser`)
/// and encodes its frames itself (`WebSocketFrameBytes`): each frame one buffer, masked eight
/// bytes at a time as it is copied, a message's text written once, behind the room its header
/// takes (`WebSocketPipeline` puts it in the pipeline).
final class WebSocketClientHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var engine: WebSocketEngine
    private var parser: WebSocketFrameParser
    /// Whether frames are being taken out of the bytes read.
    private var parsing = false
    /// Where frames are written (`WebSocketPipeline.wire(for:)`): past NIO's encoder.
    private var wire: ChannelHandlerContext?
    private let closeTimeout: TimeAmount
    private let outbox: Outbox
    /// Senders held back by the outbox go on once it is down to this many bytes.
    private let lowWatermark: Int
    private let delegate: any WebSocketTransportDelegate
    private var context: ChannelHandlerContext?
    private var peerClose: (code: WebSocketCloseCode, reason: String)?
    private var failure: WebSocketError?
    private var reported = false
    private var maskingKeys = MaskingKeys()
    /// Messages handed to the channel, and confirmed written, since the connection opened.
    private var handed = 0
    private var confirmed = 0
    /// Messages taken from the outbox once the connection was closing: never written.
    private var droppedWhileClosing = 0
    /// Flushes waiting for the messages handed before them to be written, oldest first.
    private var flushWaiters: [(upTo: Int, completion: @Sendable (Result<Void, any Error>) -> Void)] = []
    /// A read the consumers held back.
    private var readHeld = false
    /// The peer broke the protocol: the failure to carry out once what was delivered before it
    /// has been handled (``carryOutFailure()``).
    private var pendingFailure: (code: WebSocketCloseCode, reason: String, sendCloseFrame: Bool)?
    /// permessage-deflate, when negotiated.
    private var deflate: DeflateContext?

    init(
        maxMessageBytes: Int,
        deflate: DeflateContext? = nil,
        closeTimeout: TimeAmount,
        outbox: Outbox,
        lowWatermark: Int,
        delegate: any WebSocketTransportDelegate
    ) {
        self.lowWatermark = lowWatermark
        self.deflate = deflate
        self.engine = WebSocketEngine(role: .client, maxMessageBytes: maxMessageBytes, compressionNegotiated: deflate != nil)
        // A frame is at most a message (control frames: 125 bytes).
        self.parser = WebSocketFrameParser(maxFrameSize: max(maxMessageBytes, 125))
        self.closeTimeout = closeTimeout
        self.outbox = outbox
        self.delegate = delegate
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        wire = WebSocketPipeline.wire(for: context)
        if !context.channel.isActive {
            // The connection ended before the upgrade finished (a server can send its 101, a
            // close and its FIN in one read): channelInactive has passed, so report it here, or
            // the socket would wait forever on a dead connection.
            engine.channelClosed()
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            context.eventLoop.execute { handler.value.report() }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        wire = nil
        parser.reset()
    }

    /// Takes the frames out of what was read and hands each to the engine, until it reads no
    /// more; a frame the parser refuses (longer than the message limit, a fragmented or long
    /// control frame) goes to the engine too.
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        parser.append(unwrapInboundIn(data))
        guard !parsing else { return }
        parsing = true
        defer { parsing = false }
        while let action = engine.nextAction(from: &parser) {
            perform(action, context: context)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if failure == nil, engine.state != .closed {
            failure = WebSocketError(.connectionLost, "the connection failed: \(error)")
        }
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        engine.channelClosed()
        parser.reset()
        report()
        context.fireChannelInactive()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { drain() }
        context.fireChannelWritabilityChanged()
    }

    func read(context: ChannelHandlerContext) {
        if pendingFailure == nil, delegate.transportShouldRead() {
            context.read()
        } else {
            readHeld = true
        }
    }

    // MARK: Requests from the socket, on the event loop

    /// Hands what the outbox holds to the channel, with one flush; `force` writes even when the
    /// channel is not writable (before a close frame).
    func drain(force: Bool = false) {
        guard let context, let wire else { return }
        // Not writable: the drain stays scheduled, and channelWritabilityChanged runs it.
        guard force || context.channel.isWritable else { return }
        // A bounded batch per event-loop turn, so one busy connection does not hold back the
        // others on its loop; the rest goes in the next turn (all of it before a close).
        let (entries, drained, more) = outbox.take(upTo: force ? .max : Self.batchLimit, lowWatermark: lowWatermark)
        var last: ByteBuffer?
        for entry in entries {
            switch entry {
            case .message(let message):
                guard engine.canSend else {
                    droppedWhileClosing += 1
                    continue
                }
                if let previous = last { wire.write(wrapOutboundOut(previous), promise: nil) }
                last = frame(for: message, allocator: context.channel.allocator)
                handed += 1
            case .flush(let completion):
                flushWaiters.append((handed, completion))
            }
        }
        if let last {
            let batchEnd = handed
            let promise = context.eventLoop.makePromise(of: Void.self)
            wire.writeAndFlush(wrapOutboundOut(last), promise: promise)
            promise.futureResult.assumeIsolated().whenSuccess { self.confirm(upTo: batchEnd) }
        } else {
            confirm(upTo: confirmed)
        }
        if drained { delegate.transportDidDrain() }
        if more {
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            context.eventLoop.execute { handler.value.drain() }
        }
    }

    /// The most messages written in one event-loop turn.
    static let batchLimit = 256

    /// A message's frame: its bytes written once, behind room for the header, then masked there
    /// (or compressed first, when permessage-deflate was agreed).
    private func frame(for message: WebSocketMessage, allocator: ByteBufferAllocator) -> ByteBuffer {
        var payload = WebSocketFrameBytes.payloadBuffer(capacity: message.byteCount, allocator: allocator)
        let opcode: WebSocketOpcode
        switch message {
        case .string(let text):
            opcode = .text
            payload.writeString(text)
        case .data(let data):
            opcode = .binary
            payload.writeBytes(data)
        }
        if deflate != nil {
            let (compressed, rsv1) = deflate!.deflate(payload, allocator: allocator)
            return frame(opcode, compressed, rsv1: rsv1, allocator: allocator)
        }
        return frame(opcode, payload, allocator: allocator)
    }

    /// A final frame, masked with the next key: always one buffer.
    private func frame(_ opcode: WebSocketOpcode, _ payload: consuming ByteBuffer, rsv1: Bool = false, allocator: ByteBufferAllocator) -> ByteBuffer {
        WebSocketFrameBytes.encode(rsv1: rsv1, opcode: opcode, payload: payload, maskKey: maskingKeys.next(), allocator: allocator).0
    }

    /// Writes and flushes a control frame.
    private func writeControl(_ opcode: WebSocketOpcode, _ payload: ByteBuffer, context: ChannelHandlerContext) {
        (wire ?? context).writeAndFlush(wrapOutboundOut(frame(opcode, payload, allocator: context.channel.allocator)), promise: nil)
    }

    /// Every message up to `count` is written: completes the flushes waiting for them.
    private func confirm(upTo count: Int) {
        confirmed = max(confirmed, count)
        guard let first = flushWaiters.first, first.upTo <= confirmed else { return }
        let done = flushWaiters.prefix { $0.upTo <= confirmed }
        flushWaiters.removeFirst(done.count)
        for waiter in done { waiter.completion(.success(())) }
    }

    func sendPing(_ payload: [UInt8]) {
        guard let context, engine.canSend else { return }
        writeControl(.ping, context.channel.allocator.buffer(bytes: payload.prefix(125)), context: context)
    }

    func close(code: WebSocketCloseCode, reason: String) {
        guard let context else { return }
        // What was sent before the close goes first, writable or not.
        drain(force: true)
        perform(engine.close(code: code, reason: reason), context: context)
    }

    func resumeReading() {
        guard readHeld, pendingFailure == nil, let context, delegate.transportShouldRead() else { return }
        readHeld = false
        context.read()
    }

    // MARK: Actions

    private func perform(_ action: WebSocketEngine.Action, context: ChannelHandlerContext) {
        switch action {
        case .none:
            break
        case .deliver(let opcode, let buffer):
            delegate.transportDidReceive(opcode == .text ? .string(String(buffer: buffer)) : .data(Data(buffer.readableBytesView)))
        case .inflate(let opcode, let buffer):
            guard deflate != nil else { return }
            perform(engine.inflate(opcode, buffer, with: &deflate!, allocator: context.channel.allocator), context: context)
        case .sendPong(let payload):
            writeControl(.pong, payload, context: context)
        case .pongReceived(let payload):
            delegate.transportDidReceivePong(Array(payload.readableBytesView))
        case .replyToClose(let code, let reason):
            peerClose = (code ?? .noStatusReceived, reason)
            writeClose(code: code, reason: "", context: context)
            closeAfterTimeout(context: context)
        case .closeHandshakeDone(let code, let reason):
            peerClose = (code ?? .noStatusReceived, reason)
            context.close(promise: nil)
        case .sendClose(let code, let reason):
            writeClose(code: code, reason: reason, context: context)
            closeAfterTimeout(context: context)
        case .fail(let code, let reason, let sendCloseFrame):
            failure = WebSocketError(code == .messageTooBig ? .messageTooBig : .protocolViolation, reason, closeCode: code)
            // Strict, as RFC 6455 peers expect of a client (Node `ws`'s profile): the messages
            // read before the bad frame were delivered, and the application's answers to them
            // go out before the close frame. The engine reads no more; the failure is carried
            // out once every reader came back for more, or after the close timeout.
            pendingFailure = (code, reason, sendCloseFrame)
            let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
            let eventLoop = context.eventLoop
            delegate.transportWillFail {
                eventLoop.execute { handler.value.carryOutFailure() }
            }
            eventLoop.scheduleTask(in: closeTimeout) { handler.value.carryOutFailure() }
        }
    }

    /// Fails the connection as the engine said, after what was sent before (the answers).
    private func carryOutFailure() {
        guard let pending = pendingFailure, let context else { return }
        pendingFailure = nil
        drain(force: true)
        engine.failed()
        if pending.sendCloseFrame {
            writeClose(code: pending.code, reason: pending.reason, context: context)
        }
        context.close(promise: nil)
    }

    private func writeClose(code: WebSocketCloseCode?, reason: String, context: ChannelHandlerContext) {
        let payload = WebSocketEngine.closePayload(code, reason: reason, allocator: context.channel.allocator)
        writeControl(.connectionClose, payload, context: context)
    }

    /// The server should end the TCP connection after the close handshake; if it does not
    /// within the close timeout, the client does.
    private func closeAfterTimeout(context: ChannelHandlerContext) {
        let channel = context.channel
        channel.eventLoop.scheduleTask(in: closeTimeout) {
            channel.close(promise: nil)
        }
    }

    private func report() {
        guard !reported else { return }
        reported = true
        let (left, refused) = outbox.close()
        var unwritten = refused + droppedWhileClosing + (handed - confirmed)
        let lost = WebSocketError(.connectionLost, "the connection closed before the messages were written")
        for entry in left {
            switch entry {
            case .message: unwritten += 1
            case .flush(let completion): completion(.failure(lost))
            }
        }
        let waiters = flushWaiters
        flushWaiters = []
        for waiter in waiters { waiter.completion(.failure(lost)) }
        delegate.transportDidClose(code: peerClose?.code, reason: peerClose?.reason ?? "", error: failure, unwrittenMessages: unwritten)
    }
}
