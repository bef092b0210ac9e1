import DuplexSchema
import MetricsTestKit
import Testing

@testable import DuplexHost

/// The server's counters, into swift-metrics' test backend: the route series come from the
/// route table's names, and nothing a request sends can add one.
@Suite("ServerMetrics")
struct ServerMetricsTests {
    @Test("declared routes have their series at once, at zero; a declared route's connections count under its name, each transport apart")
    func declared() throws {
        let backend = TestMetrics()
        let metrics = ServerMetrics(transport: "tls", factory: backend)
        metrics.declare(routes: ["echo", "/feed/*"])
        let opened = try backend.expectCounter("duplex_connections_total", [("route", "/feed/*"), ("transport", "tls")])
        #expect(opened.totalValue == 0)
        #expect(metrics.route("/feed/*") === metrics.route("/feed/*"), "one set of counters per route")

        metrics.opened(ConnectionInfo(kind: .webSocket, route: "/feed/*"))
        var overHTTP2 = ConnectionInfo(kind: .webSocket, route: "/feed/*")
        overHTTP2.overHTTP2 = true
        metrics.opened(overHTTP2)
        #expect(opened.totalValue == 1)
        #expect(try backend.expectCounter("duplex_connections_total", [("route", "/feed/*"), ("transport", "h2")]).totalValue == 1)
        let open = try backend.expectMeter("duplex_connections_open", [("route", "/feed/*"), ("transport", "tls")])
        #expect(open.lastValue == 1)
        metrics.closed(ConnectionInfo(kind: .webSocket, route: "/feed/*"))
        #expect(open.lastValue == 0)
    }

    @Test("past the most route names, a new name counts as other: no unbounded set of series")
    func bounded() throws {
        let backend = TestMetrics()
        let metrics = ServerMetrics(factory: backend)
        metrics.declare(routes: (0..<ServerMetrics.maxRouteNames).map { "/r\($0)" })
        metrics.opened(ConnectionInfo(kind: .webSocket, route: "/one-too-many"))
        #expect(try backend.expectCounter("duplex_connections_total", [("route", "other"), ("transport", "tcp")]).totalValue == 1)
        #expect(throws: (any Error).self) {
            try backend.expectCounter("duplex_connections_total", [("route", "/one-too-many"), ("transport", "tcp")])
        }
    }

    @Test("refusals and close codes outside the fixed sets count as other; every chaos fault has its counter")
    func fixedLabels() throws {
        let backend = TestMetrics()
        let metrics = ServerMetrics(factory: backend)
        metrics.refused(status: 418)
        metrics.refused(status: 503)
        metrics.sentClose(WebSocketCloseCode(4321))
        metrics.sentClose(.normalClosure)
        #expect(try backend.expectCounter("duplex_http_refusals_total", [("status", "other")]).totalValue == 1)
        #expect(try backend.expectCounter("duplex_http_refusals_total", [("status", "503")]).totalValue == 1)
        #expect(try backend.expectCounter("duplex_close_codes_sent_total", [("code", "other")]).totalValue == 1)
        #expect(try backend.expectCounter("duplex_close_codes_sent_total", [("code", "1000")]).totalValue == 1)
        for fault in ChaosFault.allCases {
            metrics.injected(fault)
            #expect(try backend.expectCounter("duplex_faults_injected_total", [("fault", fault.rawValue)]).totalValue == 1)
        }
    }
}
