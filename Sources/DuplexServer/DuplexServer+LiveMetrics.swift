import DuplexChat
import DuplexHost
import DuplexSchema
import HTTPTypes
import Hummingbird
import NIOCore

extension DuplexServer {
    /// How often `/metrics/live` sends by default, and the bounds of its `interval`.
    static let liveMetricsInterval: (default: Int64, range: ClosedRange<Int64>) = (1_000, 100...60_000)

    /// `GET /metrics/live[?interval=MS]`: the metrics as SSE, for the demo page's live view:
    /// `event: metrics`, `data: {"chaos":BOOL,"samples":{SERIES:VALUE,…}}` at once and then every
    /// interval (1,000 ms by default, 100 to 60,000), each series as `GET /metrics` writes it. The
    /// page computes rates from consecutive events. Subscribers of one interval share each
    /// rendering (``LiveMetricsFeed``).
    func liveMetricsStream(_ stream: StreamRequest) -> StreamAnswer {
        let request = stream.request
        var interval = Self.liveMetricsInterval.default
        if let text = request.uri.queryParameters.get("interval") {
            guard let value = Int64(text), Self.liveMetricsInterval.range.contains(value) else {
                let range = Self.liveMetricsInterval.range
                return ProtocolRefusal(
                    status: .badRequest,
                    error: ChatProtocolError(
                        .init("invalid_interval"),
                        "interval must be an integer number of milliseconds from \(range.lowerBound) to \(range.upperBound) (got \(text.debugDescription))"
                    )
                ).answer
            }
            interval = value
        }
        let (feed, eventLoop, period) = (liveMetrics, stream.eventLoop, interval)
        return .stream(
            EventStream(route: "metrics-live", headers: request.headers, tracer: host.activeTracer) { writer in
                feed.subscribe(writer, every: period, on: eventLoop)
            })
    }
}
