import HTTPTypes
package import Hummingbird
package import Tracing

/// A span for each plain HTTP request (the demo page, `/health`, `/metrics`, the chaos routes,
/// refusals), reported to the server's tracer (the configuration's, or the bootstrapped one),
/// where the connections' spans go.
///
/// Hummingbird's `TracingMiddleware` does the same, but only to the bootstrapped
/// `InstrumentationSystem`, so a tracer given in `DuplexServerConfiguration.tracer` would see a
/// server's connections and not its requests. The span has Hummingbird's name (the route's path,
/// or `NotFound` when none matched) and attributes (`http.request.method`, `url.path`, `http.route`,
/// `http.response.status_code`); the query is left out, since it can carry a token. It runs from
/// the request to the end of the response body. SSE streams and WebSocket upgrades do not pass
/// through the router: they report a span of their own (``ConnectionTrace``).
/// Without a tracer, a request costs one look at the tracer.
package struct RequestTracingMiddleware: RouterMiddleware {
    package typealias Context = DuplexRequestContext

    package let tracer: @Sendable () -> (any Tracer)?

    /// Reports to what `tracer` returns at each request (nil: no span).
    package init(tracer: @escaping @Sendable () -> (any Tracer)?) {
        self.tracer = tracer
    }

    package func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let tracer = tracer() else { return try await next(request, context) }
        let start = DefaultTracerClock.now
        let response: Response
        do {
            response = try await next(request, context)
        } catch {
            let span = startSpan(tracer, request, context, at: start)
            let status = (error as? any HTTPResponseError)?.status.code ?? 500
            span.attributes["http.response.status_code"] = status
            if status >= 500 { span.setStatus(.init(code: .error)) }
            span.recordError(error)
            span.end()
            throw error
        }
        let span = startSpan(tracer, request, context, at: start)
        span.attributes["http.response.status_code"] = Int(response.status.code)
        if response.status.code >= 500 { span.setStatus(.init(code: .error)) }
        var ended = response
        let body = response.body
        ended.body = ResponseBody(contentLength: body.contentLength) { writer in
            defer { span.end() }
            try await body.write(writer)
        }
        return ended
    }

    /// The request's span, begun at `start`, a child of the context the tracer reads from its
    /// headers.
    private func startSpan(_ tracer: any Tracer, _ request: Request, _ context: Context, at start: DefaultTracerClock.Instant) -> any Span {
        let route = context.endpointPath
        var parent = ServiceContext.topLevel
        tracer.extract(request.headers, into: &parent, using: HTTPFieldsExtractor())
        let span = tracer.startSpan(route ?? "HTTP \(request.method.rawValue)", context: parent, ofKind: .server, at: start)
        span.attributes["http.request.method"] = request.method.rawValue
        span.attributes["url.path"] = request.uri.path
        if let route { span.attributes["http.route"] = route }
        return span
    }
}
