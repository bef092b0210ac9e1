package import CoreMetrics
package import DuplexSchema
import Foundation
package import NIOConcurrencyHelpers

/// What the server counts, for `GET /metrics`.
///
/// The counts go through swift-metrics, to the factory the server gives (the loopback server
/// gives a Prometheus registry of its own, so that several servers in one process, as tests run
/// them, keep apart, and writes its text exposition; the host itself links no Prometheus).
///
/// Every label value comes from a fixed set (close codes, HTTP statuses, fault kinds), with
/// `other` for anything outside it, or, for routes, from the server's route table
/// (``declare(routes:)``, ``RouteTable/connectionRouteNames``): no request can add a series. A
/// room's name is never a label.
///
/// The hot paths count in plain fields and add them here once per read batch or write batch
/// (``MessageTally``), not once per message.
package final class ServerMetrics: Sendable {
    /// The most route names counted apart; connections of any further name count as `other`.
    static let maxRouteNames = 256
    /// The close codes counted by value; others count as `other`.
    static let closeCodes: [UInt16] = [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014]
    /// The HTTP statuses of refusals counted by value; others count as `other`.
    static let refusalStatuses = [400, 408, 414, 426, 431, 503]

    /// One route's counters. A class: a connection keeps one reference to its route's, 8 bytes.
    package final class Route: Sendable {
        /// Connections open now, and opened in all.
        package let open: Meter
        package let opened: Counter
        /// Messages (WebSocket messages or SSE events) and their payload bytes, each way.
        package let messagesIn: Counter
        package let messagesOut: Counter
        package let bytesIn: Counter
        package let bytesOut: Counter
        /// permessage-deflate's bytes, each way, as they went on the wire and uncompressed.
        package let compression: Compression

        package init(
            open: Meter,
            opened: Counter,
            messagesIn: Counter,
            messagesOut: Counter,
            bytesIn: Counter,
            bytesOut: Counter,
            compression: Compression
        ) {
            self.open = open
            self.opened = opened
            self.messagesIn = messagesIn
            self.messagesOut = messagesOut
            self.bytesIn = bytesIn
            self.bytesOut = bytesOut
            self.compression = compression
        }

        /// One message of `bytes` bytes went out.
        package func sent(bytes: Int) {
            messagesOut.increment()
            bytesOut.increment(by: bytes)
        }

        /// Adds what a batch counted, and clears it.
        package func add(_ tally: inout MessageTally) {
            if tally.messagesIn > 0 {
                messagesIn.increment(by: Int(tally.messagesIn))
                bytesIn.increment(by: Int(tally.bytesIn))
            }
            if tally.messagesOut > 0 {
                messagesOut.increment(by: Int(tally.messagesOut))
                bytesOut.increment(by: Int(tally.bytesOut))
            }
            if tally.compressedIn > 0 {
                compression.compressedIn.increment(by: Int(tally.compressedIn))
                compression.uncompressedIn.increment(by: Int(tally.inflatedIn))
            }
            if tally.compressedOut > 0 {
                compression.compressedOut.increment(by: Int(tally.compressedOut))
                compression.uncompressedOut.increment(by: Int(tally.deflatedOut))
            }
            tally = MessageTally()
        }
    }

    /// The bytes of compressed messages (permessage-deflate), each way: on the wire, and
    /// uncompressed. Their ratio is what compression saved.
    package struct Compression: Sendable {
        let compressedIn: Counter
        let uncompressedIn: Counter
        let compressedOut: Counter
        let uncompressedOut: Counter
    }

    /// HTTP/2 connections and streams.
    package let http2: HTTP2Metrics

    /// Writes every metric out in Prometheus' text format, as `GET /metrics` serves it.
    private let emit: @Sendable () -> [UInt8]
    /// Makes the metrics of this server's registry: the layers above (the chat rooms, a room
    /// store) count through it too.
    package let factory: any MetricsFactory
    /// One route's series: its counters, and its connection counts over HTTP/2
    /// (`transport="h2"`): open, and opened in all.
    private struct RouteSeries: Sendable {
        var route: Route
        var http2: (open: Meter, opened: Counter)
    }
    /// Every route's series, made when the route is declared (or first counted), by name.
    private let routeSeries: NIOLockedValueBox<[String: RouteSeries]>
    private let other: RouteSeries
    private let transport: String
    private let compression: Compression
    private let closeCodesSent: [UInt16: Counter]
    private let otherCloseCodeSent: Counter
    private let refusals: [Int: Counter]
    private let otherRefusal: Counter
    private let faultsInjected: [ChaosFault: Counter]
    private let slowConsumersCut: Counter
    private let closeCodesReceivedByCode: [UInt16: Counter]
    private let otherCloseCodeReceived: Counter
    private let noCloseCodeReceived: Counter
    private let residentMemory: Gauge
    private let openFiles: Gauge
    /// Run at each scrape, before the exposition is written: the layers above record their
    /// gauges there (the chat rooms, how many and how much history).
    package let beforeScrape = NIOLockedValueBox<[@Sendable () -> Void]>([])

    /// Metrics of a server whose connections come over `transport`: `tcp`, or `tls` (a server
    /// with TLS serves every route over it); streams of an HTTP/2 connection count under `h2`.
    ///
    /// They count through `factory`, which `emit` writes out; by default nowhere (a server with
    /// no `/metrics`, such as `duplex replay`'s).
    package init(
        transport: String = "tcp", factory: any MetricsFactory = NOOPMetricsHandler.instance, emit: @escaping @Sendable () -> [UInt8] = { [] }
    ) {
        self.factory = factory
        self.transport = transport
        self.emit = emit
        let compression = Compression(
            compressedIn: Counter(
                label: "duplex_compression_bytes_total", dimensions: [("direction", "in"), ("form", "compressed")], factory: factory),
            uncompressedIn: Counter(
                label: "duplex_compression_bytes_total", dimensions: [("direction", "in"), ("form", "uncompressed")], factory: factory),
            compressedOut: Counter(
                label: "duplex_compression_bytes_total", dimensions: [("direction", "out"), ("form", "compressed")], factory: factory),
            uncompressedOut: Counter(
                label: "duplex_compression_bytes_total", dimensions: [("direction", "out"), ("form", "uncompressed")], factory: factory)
        )
        self.compression = compression
        other = Self.series("other", transport: transport, compression: compression, factory: factory)
        routeSeries = NIOLockedValueBox([:])
        func closeCode(_ code: String) -> Counter {
            Counter(label: "duplex_close_codes_sent_total", dimensions: [("code", code)], factory: factory)
        }
        closeCodesSent = Dictionary(uniqueKeysWithValues: Self.closeCodes.map { ($0, closeCode(String($0))) })
        otherCloseCodeSent = closeCode("other")
        func refusal(_ status: String) -> Counter {
            Counter(label: "duplex_http_refusals_total", dimensions: [("status", status)], factory: factory)
        }
        refusals = Dictionary(uniqueKeysWithValues: Self.refusalStatuses.map { ($0, refusal(String($0))) })
        otherRefusal = refusal("other")
        faultsInjected = Dictionary(
            uniqueKeysWithValues: ChaosFault.allCases.map {
                ($0, Counter(label: "duplex_faults_injected_total", dimensions: [("fault", $0.rawValue)], factory: factory))
            }
        )
        slowConsumersCut = Counter(label: "duplex_slow_consumers_cut_total", factory: factory)
        closeCodesReceivedByCode = Dictionary(
            uniqueKeysWithValues: Self.closeCodes.map {
                ($0, Counter(label: "duplex_close_codes_received_total", dimensions: [("code", String($0))], factory: factory))
            }
        )
        otherCloseCodeReceived = Counter(label: "duplex_close_codes_received_total", dimensions: [("code", "other")], factory: factory)
        noCloseCodeReceived = Counter(label: "duplex_close_codes_received_total", dimensions: [("code", "none")], factory: factory)
        residentMemory = Gauge(label: "duplex_process_resident_memory_bytes", factory: factory)
        openFiles = Gauge(label: "duplex_process_open_fds", factory: factory)
        http2 = HTTP2Metrics(factory: factory)
    }

    /// Makes the series of the route `name`.
    private static func series(_ name: String, transport: String, compression: Compression, factory: any MetricsFactory) -> RouteSeries {
        func counter(_ label: String, _ direction: String) -> Counter {
            Counter(label: label, dimensions: [("route", name), ("direction", direction)], factory: factory)
        }
        return RouteSeries(
            route: Route(
                open: Meter(label: "duplex_connections_open", dimensions: [("route", name), ("transport", transport)], factory: factory),
                opened: Counter(label: "duplex_connections_total", dimensions: [("route", name), ("transport", transport)], factory: factory),
                messagesIn: counter("duplex_messages_total", "in"),
                messagesOut: counter("duplex_messages_total", "out"),
                bytesIn: counter("duplex_message_bytes_total", "in"),
                bytesOut: counter("duplex_message_bytes_total", "out"),
                compression: compression
            ),
            http2: (
                open: Meter(label: "duplex_connections_open", dimensions: [("route", name), ("transport", "h2")], factory: factory),
                opened: Counter(label: "duplex_connections_total", dimensions: [("route", name), ("transport", "h2")], factory: factory)
            )
        )
    }

    /// Counts the connections of the routes `names` (``RouteTable/connectionRouteNames``) apart,
    /// from now on: their series show in `/metrics` at zero until something is counted. A server
    /// declares its table's names before it serves.
    package func declare(routes names: [String]) {
        for name in names { _ = series(name) }
    }

    /// The series of the route `name`, made now if it is new; `other`'s past
    /// ``maxRouteNames`` names. Names come from the server's code and configuration (a route's
    /// name, a scripted route's pattern), never from a request.
    private func series(_ name: String) -> RouteSeries {
        routeSeries.withLockedValue { series in
            if let found = series[name] { return found }
            guard series.count < Self.maxRouteNames else { return other }
            let made = Self.series(name, transport: transport, compression: compression, factory: factory)
            series[name] = made
            return made
        }
    }

    /// The counters of `route` (``ConnectionInfo/route``).
    package func route(_ route: String) -> Route {
        series(route).route
    }

    /// A connection was registered.
    package func opened(_ info: ConnectionInfo) {
        let series = series(info.route)
        if info.overHTTP2 {
            series.http2.opened.increment()
            series.http2.open.increment()
        } else {
            series.route.opened.increment()
            series.route.open.increment()
        }
    }

    /// A registered connection is gone.
    package func closed(_ info: ConnectionInfo) {
        let series = series(info.route)
        if info.overHTTP2 {
            series.http2.open.decrement()
        } else {
            series.route.open.decrement()
        }
    }

    /// The server sent a close frame with `code` (none: an empty close frame is not counted).
    package func sentClose(_ code: WebSocketCloseCode?) {
        guard let code else { return }
        (closeCodesSent[code.rawValue] ?? otherCloseCodeSent).increment()
    }

    /// A client's close frame arrived with `code` (nil: an empty close frame).
    package func receivedClose(_ code: WebSocketCloseCode?) {
        guard let code else { return noCloseCodeReceived.increment() }
        (closeCodesReceivedByCode[code.rawValue] ?? otherCloseCodeReceived).increment()
    }

    /// The server refused an HTTP request or connection with `status`.
    package func refused(status: Int) {
        (refusals[status] ?? otherRefusal).increment()
    }

    /// A chaos route injected `fault`.
    package func injected(_ fault: ChaosFault) {
        faultsInjected[fault]?.increment()
    }

    /// A member or stream was cut for falling behind (1013, or an SSE stream ended).
    package func cutSlowConsumer() {
        slowConsumersCut.increment()
    }

    /// The exposition: every metric in Prometheus' text format, the process gauges read now.
    package func exposition() -> [UInt8] {
        let process = Self.processUsage()
        if let bytes = process.residentBytes { residentMemory.record(bytes) }
        if let files = process.openFiles { openFiles.record(files) }
        for hook in beforeScrape.withLockedValue({ $0 }) { hook() }
        return emit()
    }

    /// Every sample of ``exposition()``, by its series as written there (`name{labels}`).
    package func samples() -> [String: Double] {
        var samples: [String: Double] = [:]
        for line in String(decoding: exposition(), as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            samples[String(line[..<space])] = value
        }
        return samples
    }

    /// The live view's event data (`GET /metrics/live`): `{"chaos":BOOL,"routes":[…],"samples":{…}}`,
    /// `routes` the names of the routes served (``RouteTable/connectionRouteNames``), which the
    /// demo page charts and offers as fault scopes.
    package func liveJSON(chaos: Bool, routes: [String]) -> String {
        struct Live: Encodable {
            var chaos: Bool
            var routes: [String]
            var samples: [String: Double]
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? encoder.encode(Live(chaos: chaos, routes: routes, samples: samples()))) ?? Data("{}".utf8)
        return String(decoding: data, as: UTF8.self)
    }

    /// The process' resident memory (`/proc/self/statm`) and open file descriptors
    /// (`/proc/self/fd`); nil where `/proc` is missing (macOS).
    static func processUsage() -> (residentBytes: Int?, openFiles: Int?) {
        let resident = (try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8))
            .flatMap { $0.split(separator: " ").dropFirst().first.flatMap { Int($0) } }
            .map { $0 * Int(sysconf(Int32(_SC_PAGESIZE))) }
        // Less the descriptor that listing the directory opens.
        let files = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")).map { max($0.count - 1, 0) }
        return (resident, files)
    }
}
