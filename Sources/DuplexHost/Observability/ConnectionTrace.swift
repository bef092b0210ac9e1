package import DuplexSchema
package import HTTPTypes
import Instrumentation
package import Logging
import NIOConcurrencyHelpers
package import Tracing
package import W3CTraceContext

/// What a WebSocket connection or SSE stream reports of itself beyond its counters:
///
/// - **Log lines.** The W3C trace context (`traceparent`, and `tracestate`) the client sent,
///   parsed by swift-w3c-trace-context: the connection's log lines carry its trace id and the
///   client's span id, so that a client's trace and the server's logs line up. A missing or
///   malformed `traceparent` is ignored, as the W3C recommendation asks.
/// - **A span** through swift-distributed-tracing, from the upgrade or request to the end, a
///   child of the context the tracer reads from the request's headers, with the route and the
///   close codes: when a tracer is set (`DuplexServerConfiguration.tracer`, or a bootstrapped
///   `InstrumentationSystem`).
///
/// A class, made only when there is something to report: a connection without either keeps a
/// nil reference, 8 bytes.
package final class ConnectionTrace: Sendable {
    /// The client's W3C trace context, for the log lines.
    package let context: TraceContext?
    /// The connection's span, ended by ``end()`` (or when this is released, whichever comes first).
    package let span: (any Span)?
    /// The close codes sent and received, and whether the span ended.
    private let state = NIOLockedValueBox<(sent: WebSocketCloseCode?, received: WebSocketCloseCode?, ended: Bool)>((nil, nil, false))

    /// What a request with `headers` on `route` reports; nil when there is nothing: no valid
    /// `traceparent`, and no `tracer`.
    package init?(_ headers: HTTPFields, route: String, tracer: (any Tracer)?) {
        let context = headers[Self.traceparent].flatMap { parent in
            try? TraceContext(traceParentHeaderValue: parent, traceStateHeaderValue: headers[Self.tracestate])
        }
        guard context != nil || tracer != nil else { return nil }
        self.context = context
        self.span = tracer.map { tracer in
            var parent = ServiceContext.topLevel
            tracer.extract(headers, into: &parent, using: HTTPFieldsExtractor())
            let span = tracer.startSpan(route, context: parent, ofKind: .server)
            span.attributes["duplex.route"] = route
            return span
        }
    }

    package static let traceparent = HTTPField.Name("traceparent")!
    static let tracestate = HTTPField.Name("tracestate")!

    /// `trace_id` and `parent_span_id`, as a connection's log lines carry them.
    package var metadata: Logger.Metadata {
        guard let context else { return [:] }
        return ["trace_id": "\(context.traceID)", "parent_span_id": "\(context.spanID)"]
    }

    /// The server sent a close frame with `code`.
    package func sentClose(_ code: WebSocketCloseCode?) {
        state.withLockedValue { $0.sent = $0.sent ?? code }
    }

    /// The client's close frame came with `code`.
    package func receivedClose(_ code: WebSocketCloseCode?) {
        state.withLockedValue { $0.received = $0.received ?? code }
    }

    /// Ends the span, once, with the close codes sent and received, if any.
    package func end() {
        guard let span else { return }
        let (sent, received, ended) = state.withLockedValue { state in
            defer { state.ended = true }
            return state
        }
        guard !ended else { return }
        if let sent { span.attributes["websocket.close_code.sent"] = Int(sent.rawValue) }
        if let received { span.attributes["websocket.close_code.received"] = Int(received.rawValue) }
        span.end()
    }

    deinit {
        // A stream whose body never ran (the client went first) ends its span all the same.
        end()
    }
}

/// Reads a request's header fields for a tracer's `extract`.
struct HTTPFieldsExtractor: Extractor {
    func extract(key: String, from fields: HTTPFields) -> String? {
        HTTPField.Name(key).flatMap { fields[$0] }
    }
}

extension Optional where Wrapped == ConnectionTrace {
    /// A connection's log metadata: its route, and its trace when the request carried one.
    package func metadata(route: String) -> Logger.Metadata {
        var metadata: Logger.Metadata = ["route": "\(route)"]
        if let trace = self { metadata.merge(trace.metadata) { _, new in new } }
        return metadata
    }
}
