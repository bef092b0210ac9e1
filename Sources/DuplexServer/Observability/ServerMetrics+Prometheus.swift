import CoreMetrics
import DuplexHost
import Prometheus

extension ServerMetrics {
    /// Metrics that count into a Prometheus registry of this server's own, which `GET /metrics`
    /// writes out in the text exposition format.
    /// The routes are those of the table the server serves (``ServerMetrics/declare(routes:)``).
    static func prometheus(transport: String) -> ServerMetrics {
        let registry = PrometheusCollectorRegistry()
        return ServerMetrics(transport: transport, factory: PrometheusMetricsFactory(registry: registry)) {
            registry.emitToBuffer()
        }
    }
}
