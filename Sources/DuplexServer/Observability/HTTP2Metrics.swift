import CoreMetrics
import NIOConcurrencyHelpers

/// What the server counts of HTTP/2, for `GET /metrics` and `GET /health`: connections that
/// negotiated `h2` and their streams, open now and in all, and what each stream became.
final class HTTP2Metrics: Sendable {
    /// What a stream became once its request head was read.
    enum StreamKind: String, CaseIterable {
        /// A WebSocket through extended CONNECT.
        case webSocket = "websocket"
        /// Any other request, SSE streams included.
        case http
        /// A request the server refused (503, 426, 400).
        case refused
    }

    private let connectionsOpen: Meter
    private let connectionsTotal: Counter
    private let streamsOpen: Meter
    private let streamsTotal: [StreamKind: Counter]
    private let webSocketsOpen: Meter
    /// The same counts, readable for `/health`.
    private let counts = NIOLockedValueBox((connections: 0, streams: 0, webSockets: 0))

    init(factory: any MetricsFactory) {
        connectionsOpen = Meter(label: "duplex_http2_connections_open", factory: factory)
        connectionsTotal = Counter(label: "duplex_http2_connections_total", factory: factory)
        streamsOpen = Meter(label: "duplex_http2_streams_open", factory: factory)
        webSocketsOpen = Meter(label: "duplex_http2_websockets_open", factory: factory)
        streamsTotal = Dictionary(
            uniqueKeysWithValues: StreamKind.allCases.map { ($0, Counter(label: "duplex_http2_streams_total", dimensions: [("kind", $0.rawValue)], factory: factory)) }
        )
    }

    func connectionOpened() {
        connectionsTotal.increment()
        connectionsOpen.increment()
        counts.withLockedValue { $0.connections += 1 }
    }

    func connectionClosed() {
        connectionsOpen.decrement()
        counts.withLockedValue { $0.connections -= 1 }
    }

    func streamOpened() {
        streamsOpen.increment()
        counts.withLockedValue { $0.streams += 1 }
    }

    func streamClosed() {
        streamsOpen.decrement()
        counts.withLockedValue { $0.streams -= 1 }
    }

    /// A stream's request head was read and the stream became `kind`.
    func served(_ kind: StreamKind) {
        streamsTotal[kind]?.increment()
        if kind == .webSocket {
            webSocketsOpen.increment()
            counts.withLockedValue { $0.webSockets += 1 }
        }
    }

    /// A WebSocket over HTTP/2 ended.
    func webSocketClosed() {
        webSocketsOpen.decrement()
        counts.withLockedValue { $0.webSockets -= 1 }
    }

    /// `{"connections":N,"streams":N,"webSockets":N}`: open now.
    var healthJSON: String {
        let (connections, streams, webSockets) = counts.withLockedValue { $0 }
        return #"{"connections":\#(connections),"streams":\#(streams),"webSockets":\#(webSockets)}"#
    }
}
