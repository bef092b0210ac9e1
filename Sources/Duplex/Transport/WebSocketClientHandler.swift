import DuplexSchema
import DuplexWire
import Foundation
import NIOCore
import NIOWebSocket

/// The client's channel handler: it runs DuplexWire's `WebSocketEngine` (as the client) on the
/// event loop and carries out its actions, drains the ``Outbox`` while the channel is
/// writable, and holds back reads while the consumers are behind.
final class WebSocketClientHandler: ChannelDuplexHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var engine: WebSocketEngine
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
        self.closeTimeout = closeTimeout
        self.outbox = outbox
        self.delegate = delegate
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
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
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        perform(engine.received(unwrapInboundIn(data)), context: context)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOWebSocketError || error is ByteToMessageDecoderError {
            perform(engine.decodingFailed(error), context: context)
        } else {
            if failure == nil, engine.state != .closed {
                failure = WebSocketError(.connectionLost, "the connection failed: \(error)")
            }
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        engine.channelClosed()
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
        guard let context else { return }
        // Not writable: the drain stays scheduled, and channelWritabilityChanged runs it.
        guard force || context.channel.isWritable else { return }
        // A bounded batch per event-loop turn, so one busy connection does not hold back the
        // others on its loop; the rest goes in the next turn (all of it before a close).
        let (entries, drained, more) = outbox.take(upTo: force ? .max : Self.batchLimit, lowWatermark: lowWatermark)
        var last: WebSocketFrame?
        for entry in entries {
            switch entry {
            case .message(let message):
                guard engine.canSend else {
                    droppedWhileClosing += 1
                    continue
                }
                if let previous = last { context.write(wrapOutboundOut(previous), promise: nil) }
                last = frame(for: message, allocator: context.channel.allocator)
                handed += 1
            case .flush(let completion):
                flushWaiters.append((handed, completion))
            }
        }
        if let last {
            let batchEnd = handed
            let promise = context.eventLoop.makePromise(of: Void.self)
            context.writeAndFlush(wrapOutboundOut(last), promise: promise)
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

    private func frame(for message: WebSocketMessage, allocator: ByteBufferAllocator) -> WebSocketFrame {
        let (opcode, payload): (WebSocketOpcode, ByteBuffer) =
            switch message {
            case .string(let text): (.text, allocator.buffer(string: text))
            case .data(let data): (.binary, allocator.buffer(bytes: data))
            }
        if deflate != nil {
            let (compressed, rsv1) = deflate!.deflate(payload, allocator: allocator)
            return WebSocketFrame(fin: true, rsv1: rsv1, opcode: opcode, maskKey: maskingKeys.next(), data: compressed)
        }
        return WebSocketFrame(fin: true, opcode: opcode, maskKey: maskingKeys.next(), data: payload)
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
        let frame = WebSocketFrame(fin: true, opcode: .ping, maskKey: maskingKeys.next(), data: context.channel.allocator.buffer(bytes: payload.prefix(125)))
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
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
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, maskKey: maskingKeys.next(), data: payload)), promise: nil)
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
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: maskingKeys.next(), data: payload)), promise: nil)
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
