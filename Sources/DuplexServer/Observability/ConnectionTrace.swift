import HTTPTypes
import Logging
import W3CTraceContext

/// The W3C trace context (`traceparent`, and `tracestate`) a client sent with a WebSocket
/// upgrade or an SSE request, parsed by swift-w3c-trace-context: the connection's log lines carry
/// its trace id and the client's span id, so that a client's trace and the server's logs line
/// up. A missing or malformed `traceparent` is ignored, as the W3C recommendation asks.
///
/// A class: a connection without one keeps a nil reference, 8 bytes, not the context itself.
final class ConnectionTrace: Sendable {
    let context: TraceContext

    /// The trace context of a request with these headers; nil without a valid `traceparent`.
    init?(_ headers: HTTPFields) {
        guard let parent = headers[Self.traceparent],
            let context = try? TraceContext(traceParentHeaderValue: parent, traceStateHeaderValue: headers[Self.tracestate])
        else { return nil }
        self.context = context
    }

    static let traceparent = HTTPField.Name("traceparent")!
    static let tracestate = HTTPField.Name("tracestate")!

    /// `trace_id` and `parent_span_id`, as a connection's log lines carry them.
    var metadata: Logger.Metadata {
        ["trace_id": "\(context.traceID)", "parent_span_id": "\(context.spanID)"]
    }
}

extension Optional where Wrapped == ConnectionTrace {
    /// A connection's log metadata: its route, and its trace when the request carried one.
    func metadata(route: String) -> Logger.Metadata {
        var metadata: Logger.Metadata = ["route": "\(route)"]
        if let trace = self { metadata.merge(trace.metadata) { _, new in new } }
        return metadata
    }
}
