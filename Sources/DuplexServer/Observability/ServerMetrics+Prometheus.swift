import CoreMetrics
import DuplexHost
import Prometheus

extension ServerMetrics {
    /// Metrics that count into a Prometheus registry of this server's own, which `GET /metrics`
    /// writes out in the text exposition format.
    /// `routes`: the server's own route names besides the built-in ones (its scripted routes'
    /// patterns), each counted under its name.
    static func prometheus(transport: String, routes: [String]) -> ServerMetrics {
        let registry = PrometheusCollectorRegistry()
        return ServerMetrics(transport: transport, routes: routes, factory: PrometheusMetricsFactory(registry: registry)) {
            registry.emitToBuffer()
        }
    }
}
