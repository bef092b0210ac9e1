import DuplexSchema
package import HTTPTypes
package import Hummingbird
package import NIOCore
package import Tracing

/// What a stream route (``RouteTable/Service/stream(_:)``) answers a request, on the
/// connection's event loop: a `text/event-stream` response fed by a source, a plain answer
/// (a refusal, mostly), or one of these later (a route that waits on something first).
package enum StreamAnswer: Sendable {
    /// Stream events: the ``EventStream``'s source writes them.
    case stream(EventStream)
    /// Answer with this status, headers and body instead.
    case respond(RouteRefusal)
    /// Answer once the future completes, on the connection's event loop; a failed future is
    /// answered 500.
    case later(EventLoopFuture<StreamAnswer>)

    /// A JSON answer with `status`.
    package static func json(_ status: HTTPResponse.Status, _ body: String) -> StreamAnswer {
        .respond(RouteRefusal(status: status, headers: [.contentType: "application/json; charset=utf-8"], body: body))
    }
}

/// A request for a stream route, with its body read (within the server's message limit).
package struct StreamRequest: Sendable {
    /// The request; its body is ``body``, read in full.
    package var request: Request
    package var body: ByteBuffer
    /// What the route's pattern captured (`room` for `/chat/:room/events`).
    package var captures: [String: String]
    /// The connection (HTTP/1.1) or stream (HTTP/2) the answer goes to.
    package var channel: any Channel
    package var eventLoop: any EventLoop { channel.eventLoop }
}

/// One SSE response: what it is (for the registry, the metrics and the logs) and how its events
/// start.
///
/// A stream writes `retry:` first, then what its source offers. When nothing has been written
/// for the heartbeat interval it writes a comment line. It ends when the client goes away, when
/// the server shuts down, when its source finishes the writer, or when the client falls more
/// than `outboundQueueLimit` events or `outboundQueueBytes` bytes behind; the client then
/// resumes from its `Last-Event-ID`. A scripted stream writes no `retry:` and no heartbeat of
/// its own: only what its script says.
package struct EventStream: Sendable {
    /// Stops a source: called once, when the stream ends.
    package typealias Stop = @Sendable () -> Void

    package var info: ConnectionInfo
    package var trace: ConnectionTrace?
    package var scripted = false
    /// Whether the stream is cut (the connection, or the HTTP/2 stream, closed with the response
    /// unfinished) rather than ended, once its source finished the writer.
    package var dropsAtEnd: @Sendable () -> Bool = { false }
    /// Sets the source going, on the event loop: it offers SSE text to the writer from any
    /// thread (a room's fan-out, an event-loop timer) and returns how to stop it. A source that
    /// cannot start finishes the writer.
    package var start: @Sendable (EventStreamWriter) -> Stop
    /// Called instead of `start` when the client left before the stream could begin (while a
    /// ``StreamAnswer/later(_:)`` was pending): what the answer holds is let go.
    package var abandon: @Sendable () -> Void = {}

    /// A stream of `route` (its name in the metrics, the logs and its span), traced from the
    /// request's `headers` to `tracer` (and the client's `traceparent`).
    package init(
        route: String,
        room: String? = nil,
        headers: HTTPFields,
        tracer: (any Tracer)?,
        scripted: Bool = false,
        dropsAtEnd: @escaping @Sendable () -> Bool = { false },
        start: @escaping @Sendable (EventStreamWriter) -> Stop,
        abandon: @escaping @Sendable () -> Void = {}
    ) {
        self.info = ConnectionInfo(kind: .eventStream, route: route, room: room)
        self.trace = ConnectionTrace(headers, route: route, tracer: tracer)
        self.scripted = scripted
        self.dropsAtEnd = dropsAtEnd
        self.start = start
        self.abandon = abandon
    }

    /// The response head: an event stream, never cached or buffered by a proxy.
    package static let headers: HTTPFields = [
        .contentType: "text/event-stream; charset=utf-8",
        .cacheControl: "no-cache",
        HTTPField.Name("X-Accel-Buffering")!: "no",
    ]
}
