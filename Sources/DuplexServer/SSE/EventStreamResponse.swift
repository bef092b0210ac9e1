import DuplexSchema
import HTTPTypes
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTPTypesHTTP1

/// Builds the long-lived `text/event-stream` responses of the SSE routes.
///
/// A stream writes `retry:` first, then what its source yields. When nothing has been written for
/// the heartbeat interval it writes a comment line. It ends when the client goes away, when the
/// server shuts down, or when the client falls more than `outboundQueueLimit` events or
/// `outboundQueueBytes` bytes behind; the client then resumes from its `Last-Event-ID`.
///
/// One task per stream, the response body's, which writes: the source, the heartbeat and the
/// registry's commands are callbacks and event-loop timers, not tasks of their own.
struct EventStreamResponse {
    /// Where a source puts SSE text, ready to write: bounded in count and bytes.
    typealias Sink = OutboundQueue

    /// Stops a source: called once, when the stream ends.
    typealias Stop = @Sendable () -> Void

    let server: DuplexServer

    /// A streaming response whose events come from a source that `start` sets going: it puts
    /// text in the sink from any thread (a room's fan-out, an event-loop timer) and returns how
    /// to stop it, called when the stream ends. A source that cannot start finishes the sink.
    /// A scripted stream (``scripted``) writes no `retry:` and no heartbeat of its own: only
    /// what its script says. Where `dropsAtEnd` says so once the source finished, the connection
    /// (an HTTP/2 stream) is closed with the response unfinished.
    func response(
        info: ConnectionInfo,
        channel: any Channel,
        trace: ConnectionTrace? = nil,
        scripted: Bool = false,
        dropsAtEnd: @escaping @Sendable () -> Bool = { false },
        start: @escaping @Sendable (Sink) async -> Stop
    ) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/event-stream; charset=utf-8"
        headers[.cacheControl] = "no-cache"
        headers[HTTPField.Name("X-Accel-Buffering")!] = "no"
        let configuration = server.configuration
        let registry = server.connections
        let (metrics, routeMetrics) = (server.metrics, server.metrics.route(info.route))
        let body = ResponseBody { writer in
            let sink = OutboundQueue(maxCount: configuration.outboundQueueLimit, maxBytes: configuration.outboundQueueBytes)
            let gate = StallGate()
            var info = info
            info.overHTTP2 = ConnectionInfo.isHTTP2Stream(channel)
            let registration = registry.register(info) { command in
                switch command {
                case .stall(let duration):
                    gate.stall(for: duration)
                case .drop:
                    channel.close(promise: nil)
                    sink.finish()
                case .close:
                    sink.finish()
                }
            }
            EndOnInputClosed.install(on: channel) { sink.finish() }
            registry.logger.debug("event stream opened", metadata: trace.metadata(route: info.route))
            defer {
                trace?.end()
                // Unregistered, and every event written counted, before the line says so.
                registry.remove(registration)
                registry.logger.debug("event stream ended", metadata: trace.metadata(route: info.route))
            }
            let heartbeat = scripted ? nil : Heartbeat(every: configuration.heartbeatInterval, sink: sink, eventLoop: channel.eventLoop)
            defer { heartbeat?.stop() }
            let stop = await start(sink)
            defer { stop() }
            if !scripted {
                try await writer.write(ByteBuffer(string: ServerSentEvent.retryDirective(milliseconds: configuration.sseRetryMilliseconds)))
            }
            for await text in sink.items {
                await gate.wait()
                try await writer.write(ByteBuffer(string: text))
                sink.written(text)
                heartbeat?.wrote()
                routeMetrics.sent(bytes: text.utf8.count)
            }
            if sink.overflowed { metrics.cutSlowConsumer() }
            if dropsAtEnd() {
                // Behind the writes above on the event loop, so what was written goes first.
                try? await channel.eventLoop.submit { channel.close(promise: nil) }.get()
                return
            }
            try await writer.finish(nil)
        }
        return Response(status: .ok, headers: headers, body: body)
    }

    /// Queues SSE text; when the queue is full, ends the stream so the client resumes instead.
    static func yield(_ text: String, to sink: Sink) -> Bool {
        if sink.offer(text) { return true }
        sink.finish()
        return false
    }
}

/// A stream's heartbeat: a comment line once nothing was written for `interval`, from a timer on
/// the connection's event loop (no task).
final class Heartbeat: Sendable {
    private let interval: Duration
    private let sink: OutboundQueue
    private let eventLoop: any EventLoop
    private let state = NIOLockedValueBox((lastWrite: ContinuousClock.now, timer: Scheduled<Void>?.none, stopped: false))

    init(every interval: Duration, sink: OutboundQueue, eventLoop: any EventLoop) {
        self.interval = interval
        self.sink = sink
        self.eventLoop = eventLoop
        arm(at: ContinuousClock.now.advanced(by: interval))
    }

    /// Something was written: the next heartbeat is due an interval from now.
    func wrote() {
        state.withLockedValue { $0.lastWrite = .now }
    }

    /// No more heartbeats.
    func stop() {
        state.withLockedValue { state in
            state.stopped = true
            state.timer?.cancel()
            state.timer = nil
        }
    }

    private func arm(at due: ContinuousClock.Instant) {
        let delay = TimeAmount(max(due - .now, .zero))
        state.withLockedValue { state in
            guard !state.stopped else { return }
            state.timer = eventLoop.scheduleTask(in: delay) { self.fire() }
        }
    }

    private func fire() {
        let due = state.withLockedValue { $0.lastWrite }.advanced(by: interval)
        if ContinuousClock.now >= due {
            guard EventStreamResponse.yield(ServerSentEvent.comment("heartbeat"), to: sink) else { return }
            wrote()
            arm(at: ContinuousClock.now.advanced(by: interval))
        } else {
            arm(at: due)
        }
    }
}

/// Holds a connection's writers back while it is stalled.
final class StallGate: Sendable {
    private let until = NIOLockedValueBox<ContinuousClock.Instant?>(nil)

    /// Stalls for `duration` from now.
    func stall(for duration: Duration) {
        until.withLockedValue { $0 = .now + duration }
    }

    /// Returns once the stall, if any, is over.
    func wait() async {
        while let end = until.withLockedValue({ $0 }), end > .now {
            try? await Task.sleep(until: end, clock: .continuous)
        }
    }
}

/// Ends an HTTP/1.1 event stream when the client closes its side of the connection: the server
/// allows half-closure, and a stream that never ends would go on writing to a client that left
/// (over TLS, the client's close_notify is that end, and a client waits for the server's
/// answer to it). Over HTTP/2 a request's END_STREAM is not a departure, so a stream gets none.
final class EndOnInputClosed: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny

    private let end: @Sendable () -> Void

    private init(end: @escaping @Sendable () -> Void) {
        self.end = end
    }

    /// Adds the handler behind the HTTP codec of `channel`, on its event loop.
    static func install(on channel: any Channel, end: @escaping @Sendable () -> Void) {
        channel.eventLoop.execute {
            let operations = channel.pipeline.syncOperations
            // An HTTP/2 stream has swift-nio-http2's codec instead: it gets none.
            guard let codec = try? operations.handler(type: HTTP1ToHTTPServerCodec.self) else { return }
            try? operations.addHandler(EndOnInputClosed(end: end), position: .after(codec))
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed {
            end()
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }
}
