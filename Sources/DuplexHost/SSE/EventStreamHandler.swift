import DuplexSchema
package import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTPTypes

/// What the server's SSE streams share: how a request is matched to a stream route, and the
/// limits, registry and metrics every stream is served with.
package struct EventStreamServing: Sendable {
    /// The stream route for a request head, and what its pattern captured; nil when no stream
    /// route matches (the request goes to Hummingbird).
    package var route: @Sendable (HTTPRequest) -> (RouteTable.Stream, [String: String])?
    package var registry: ConnectionRegistry
    package var metrics: ServerMetrics
    /// The largest request body a stream route reads (a POST's); past it, 413.
    package var maxBodyBytes: Int
    package var queueLimit: (count: Int, bytes: Int)
    package var heartbeatInterval: Duration
    package var retryMilliseconds: Int

    /// Streams routed by `route`, registered in `registry` and counted in `metrics`, within these
    /// limits.
    package init(
        route: @escaping @Sendable (HTTPRequest) -> (RouteTable.Stream, [String: String])?,
        registry: ConnectionRegistry,
        metrics: ServerMetrics,
        maxBodyBytes: Int,
        queueLimit: (count: Int, bytes: Int),
        heartbeatInterval: Duration,
        retryMilliseconds: Int
    ) {
        self.route = route
        self.registry = registry
        self.metrics = metrics
        self.maxBodyBytes = maxBodyBytes
        self.queueLimit = queueLimit
        self.heartbeatInterval = heartbeatInterval
        self.retryMilliseconds = retryMilliseconds
    }
}

/// Serves the SSE streams of one connection (HTTP/1.1) or one stream (HTTP/2) on its event
/// loop, with no task: it sits behind the HTTP codec, takes the requests a stream route
/// matches, reads their body (within ``EventStreamServing/maxBodyBytes``), asks the route, and
/// writes the answer: a `text/event-stream` response whose chunks its ``EventStreamWriter``
/// hands it, or a plain one.
///
/// Over HTTP/1.1 it is placed one of two ways. On a connection whose first request is a stream
/// it is all there is: the response says `Connection: close`, and the connection closes when
/// the stream ends. On any other connection it sits in front of Hummingbird's async channel:
/// plain requests pass through to it, and a later request on the same connection may be a
/// stream (keep-alive), served here once the response before it is complete, after which the
/// connection goes on. Over HTTP/2 it serves the one stream it was placed on.
final class EventStreamHandler: ChannelDuplexHandler, RemovableChannelHandler, EventStreamOutput {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    /// Where the handler is, and so what follows a stream.
    enum Placement {
        /// The only request handler of an HTTP/1.1 connection whose first request is a stream:
        /// the connection closes after it.
        case streamOnly
        /// In front of Hummingbird on an HTTP/1.1 connection: it goes on after a stream.
        case keepAlive
        /// On one HTTP/2 stream.
        case http2Stream
    }

    private enum State {
        /// Between requests.
        case idle
        /// A plain request's parts go to Hummingbird until its response ends.
        case passing
        /// A stream request's body is being read.
        case reading(HTTPRequest, RouteTable.Stream, [String: String], ByteBuffer)
        /// The route is deciding (``StreamAnswer/later(_:)``), or a plain answer is being written.
        case answering
        /// A stream is being served.
        case streaming(ServedStream)
        /// The connection is closing; what it reads is dropped.
        case closing
    }

    /// A stream being served: what ends it, on the event loop.
    private final class ServedStream {
        let writer: EventStreamWriter
        let stream: EventStream
        let info: ConnectionInfo
        let routeMetrics: ServerMetrics.Route
        var registration: UInt64?
        var heartbeat: Heartbeat?
        var stop: EventStream.Stop?
        var ended = false

        init(writer: EventStreamWriter, stream: EventStream, info: ConnectionInfo, routeMetrics: ServerMetrics.Route) {
            self.writer = writer
            self.stream = stream
            self.info = info
            self.routeMetrics = routeMetrics
        }
    }

    private let serving: EventStreamServing
    private let placement: Placement
    private var state = State.idle
    /// Parts read while a stream or answer was in progress, or while a plain response before a
    /// stream request was still being written: taken in order once it is done.
    private var held: [HTTPRequestPart] = []
    private var heldBytes = 0
    private var context: ChannelHandlerContext?

    init(serving: EventStreamServing, placement: Placement) {
        self.serving = serving
        self.placement = placement
    }

    /// Whether the channel takes more writes now.
    var isWritable: Bool { context?.channel.isWritable ?? false }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        endStream()
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        endStream()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        take(unwrapInboundIn(data), context: context)
    }

    private func take(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        switch state {
        case .closing:
            return
        case .answering, .streaming:
            hold(part, context: context)
        case .passing:
            if !held.isEmpty {
                hold(part, context: context)
            } else if case .head(let head) = part, serving.route(head) != nil {
                // A stream asked for behind a plain request whose response is not done: it is
                // served after that response.
                hold(part, context: context)
            } else {
                context.fireChannelRead(wrapInboundOut(part))
            }
        case .idle:
            guard case .head(let head) = part, let (route, captures) = serving.route(head) else {
                if case .head = part { state = .passing }
                context.fireChannelRead(wrapInboundOut(part))
                return
            }
            state = .reading(head, route, captures, context.channel.allocator.buffer(capacity: 0))
            // A client that waits to be asked for the body (curl does, for a large one) is asked.
            if head.headerFields[.expect]?.lowercased() == "100-continue" {
                context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
            }
        case .reading(let head, let route, let captures, var body):
            switch part {
            case .head:
                // A codec never does this; a connection that somehow did is cut, and says why.
                serving.registry.logger.debug("a stream request's head came again before its end: connection closed")
                close(context: context)
            case .body(var chunk):
                guard body.readableBytes + chunk.readableBytes <= serving.maxBodyBytes else {
                    state = .answering
                    answer(
                        .json(.contentTooLarge, #"{"error":"the request body is over the server's message limit"}"#), unread: true, context: context)
                    return
                }
                state = .idle  // drops the buffer's other reference, so the write below does not copy
                body.writeBuffer(&chunk)
                state = .reading(head, route, captures, body)
            case .end:
                state = .answering
                let request = StreamRequest(
                    request: Request(head: head, body: .init(buffer: body)), body: body, captures: captures, channel: context.channel)
                answer(route(request), unread: false, context: context)
            }
        }
    }

    /// Holds `part` until what is in progress is done; a client that sends more than a request's
    /// worth meanwhile is cut off.
    private func hold(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        if case .body(let chunk) = part { heldBytes += chunk.readableBytes }
        held.append(part)
        if held.count > 1_024 || heldBytes > serving.maxBodyBytes {
            serving.registry.logger.debug(
                "a client sent more than a request's worth while its stream or answer was in progress: connection closed",
                metadata: ["parts": "\(held.count)", "bytes": "\(heldBytes)"])
            close(context: context)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Over HTTP/1.1 the server allows half-closure: a client that closes its side has left
        // (over TLS, its close_notify is that end, and it waits for the server's answer). Over
        // HTTP/2 a request's END_STREAM is not a departure.
        if placement != .http2Stream, let event = event as? ChannelEvent, event == .inputClosed {
            switch state {
            case .streaming, .closing: close(context: context)
            default: break
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if case .streaming(let served) = state {
            serving.registry.logger.debug(
                "event stream failed", metadata: served.stream.trace.metadata(route: served.info.route).merging(["error": "\(error)"]) { $1 })
            close(context: context)
            return
        }
        context.fireErrorCaught(error)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, case .streaming(let served) = state { served.writer.drain() }
        context.fireChannelWritabilityChanged()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        // Hummingbird's response to a plain request: once it ends, what was held goes on.
        let ended: Bool
        if case .passing = state, case .end = unwrapOutboundIn(data) {
            state = .idle
            ended = true
        } else {
            ended = false
        }
        context.write(data, promise: promise)
        if ended { takeHeld(context: context) }
    }

    // MARK: Answers

    /// Writes `answer`. Where the request was `unread` (its body passed the limit), the
    /// connection closes after the answer.
    private func answer(_ answer: StreamAnswer, unread: Bool, context: ChannelHandlerContext) {
        switch answer {
        case .stream(let stream):
            start(stream, context: context)
        case .respond(let refusal):
            serving.metrics.refused(status: refusal.status.code)
            let closes = unread || placement == .streamOnly
            context.write(wrapOutboundOut(.head(refusal.head(http2: placement == .http2Stream, closes: closes))), promise: nil)
            context.write(wrapOutboundOut(.body(context.channel.allocator.buffer(string: refusal.body))), promise: nil)
            let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
            finishAnswer(closes: closes || placement == .http2Stream, lingers: unread, after: written, context: context)
        case .later(let future):
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            future.hop(to: context.eventLoop).whenComplete { result in
                let (handler, context) = loopBound.value
                guard case .answering = handler.state else {
                    if case .success(.stream(let stream)) = result { stream.abandon() }
                    return
                }
                switch result {
                case .success(let answer):
                    handler.answer(answer, unread: unread, context: context)
                case .failure(let error):
                    handler.serving.registry.logger.warning("a stream route failed to answer", metadata: ["error": "\(error)"])
                    handler.answer(.json(.internalServerError, #"{"error":"the stream could not be opened"}"#), unread: unread, context: context)
                }
            }
        }
    }

    /// A plain answer or a stream was written: the connection (or HTTP/2 stream) closes, or
    /// takes its next request. A connection that `lingers` (the client may still be sending a
    /// body it did not read) closes its output first and reads on, dropping what it reads, until
    /// the client closes or a second has passed: closing with unread input would reset the
    /// connection, and the client could lose the answer.
    private func finishAnswer(closes: Bool, lingers: Bool = false, after written: EventLoopFuture<Void>, context: ChannelHandlerContext) {
        if closes {
            state = .closing
            let channel = context.channel
            if lingers && placement != .http2Stream {
                written.whenComplete { _ in
                    channel.close(mode: .output, promise: nil)
                    channel.eventLoop.scheduleTask(in: .seconds(1)) { channel.close(promise: nil) }
                }
            } else {
                written.whenComplete { _ in channel.close(promise: nil) }
            }
        } else {
            state = .idle
            takeHeld(context: context)
        }
    }

    /// Takes what was held, in order, as if it were read now.
    private func takeHeld(context: ChannelHandlerContext) {
        guard !held.isEmpty else { return }
        var parts = held[...]
        held = []
        heldBytes = 0
        while let part = parts.popFirst() {
            take(part, context: context)
            switch state {
            case .idle, .passing, .reading: continue
            case .answering, .streaming, .closing: break
            }
            // Something is in progress again: the rest waits behind it.
            held = Array(parts) + held
            heldBytes = held.reduce(0) { total, part in if case .body(let chunk) = part { total + chunk.readableBytes } else { total } }
            break
        }
        context.fireChannelReadComplete()
    }

    private func start(_ stream: EventStream, context: ChannelHandlerContext) {
        let writer = EventStreamWriter(
            output: self, eventLoop: context.eventLoop, maxCount: serving.queueLimit.count, maxBytes: serving.queueLimit.bytes)
        var info = stream.info
        info.overHTTP2 = placement == .http2Stream
        let served = ServedStream(writer: writer, stream: stream, info: info, routeMetrics: serving.metrics.route(info.route))
        state = .streaming(served)
        let channel = context.channel
        served.registration = serving.registry.register(info) { command in
            switch command {
            case .stall(let duration): writer.stall(for: duration)
            case .drop: channel.close(promise: nil)
            case .close: writer.finish()
            }
        }
        serving.registry.logger.debug("event stream opened", metadata: stream.trace.metadata(route: info.route))
        var headers = EventStream.headers
        if placement == .streamOnly { headers[.connection] = "close" }
        context.write(wrapOutboundOut(.head(HTTPResponse(status: .ok, headerFields: headers))), promise: nil)
        if !stream.scripted {
            let retry = ServerSentEvent.retryDirective(milliseconds: serving.retryMilliseconds)
            _ = writer.offer(context.channel.allocator.buffer(string: retry), counted: false)
            served.heartbeat = Heartbeat(every: serving.heartbeatInterval, writer: writer, eventLoop: context.eventLoop)
        }
        context.flush()
        let stop = stream.start(writer)
        if served.ended { stop() } else { served.stop = stop }
    }

    /// On the loop, from the writer: the stream's next chunks.
    func write(_ chunks: [ByteBuffer]) {
        guard let context, case .streaming(let served) = state else { return }
        for chunk in chunks {
            context.write(wrapOutboundOut(.body(chunk)), promise: nil)
            served.routeMetrics.sent(bytes: chunk.readableBytes)
        }
        served.heartbeat?.wrote()
        context.flush()
    }

    /// On the loop, from the writer: it is finished and everything it accepted was written. The
    /// response ends (or is cut, where the stream says so), and the connection goes on or closes.
    func writerFinished(overflowed: Bool) {
        guard let context, case .streaming(let served) = state else { return }
        if overflowed { serving.metrics.cutSlowConsumer() }
        if served.stream.dropsAtEnd() {
            endStream()
            close(context: context)
            return
        }
        let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        endStream()
        finishAnswer(closes: placement != .keepAlive, after: written, context: context)
    }

    /// The stream is over, however it ended: its source stops, and it leaves the registry.
    private func endStream() {
        guard case .streaming(let served) = state, !served.ended else { return }
        served.ended = true
        state = .answering
        served.heartbeat?.stop()
        served.writer.finish()
        served.stop?()
        served.stop = nil
        served.stream.trace?.end()
        if let registration = served.registration { serving.registry.remove(registration) }
        serving.registry.logger.debug("event stream ended", metadata: served.stream.trace.metadata(route: served.info.route))
    }

    private func close(context: ChannelHandlerContext) {
        endStream()
        state = .closing
        held = []
        context.close(promise: nil)
    }
}

/// A stream's heartbeat: a comment line once nothing was written for `interval`, from a timer on
/// the connection's event loop (no task).
final class Heartbeat {
    private let interval: TimeAmount
    private let writer: EventStreamWriter
    private let eventLoop: any EventLoop
    /// When something was last written, by the loop's clock (a simulated network's is virtual).
    private var lastWrite: NIODeadline
    private var timer: Scheduled<Void>?

    init(every interval: Duration, writer: EventStreamWriter, eventLoop: any EventLoop) {
        self.interval = TimeAmount(interval)
        self.writer = writer
        self.eventLoop = eventLoop
        self.lastWrite = eventLoop.now
        arm(at: eventLoop.now + self.interval)
    }

    /// Something was written: the next heartbeat is due an interval from now.
    func wrote() {
        lastWrite = eventLoop.now
    }

    /// No more heartbeats.
    func stop() {
        timer?.cancel()
        timer = nil
    }

    private func arm(at due: NIODeadline) {
        let loopBound = NIOLoopBound(self, eventLoop: eventLoop)
        timer = eventLoop.scheduleTask(deadline: due) { loopBound.value.fire() }
    }

    private func fire() {
        guard timer != nil else { return }
        let due = lastWrite + interval
        if eventLoop.now >= due {
            guard writer.send(ServerSentEvent.comment("heartbeat")) else { return }
            wrote()
            arm(at: eventLoop.now + interval)
        } else {
            arm(at: due)
        }
    }
}
