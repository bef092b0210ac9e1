import Duplex
import Prometheus  // swift-prometheus, or any swift-metrics backend

let registry = PrometheusCollectorRegistry()
var configuration = WebSocketConfiguration()
configuration.metrics = PrometheusMetricsFactory(registry: registry)  // or leave nil and bootstrap MetricsSystem
