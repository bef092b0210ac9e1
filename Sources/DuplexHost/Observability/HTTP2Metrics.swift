package import CoreMetrics
import DuplexWire
import NIOConcurrencyHelpers

/// What the server counts of HTTP/2, for `GET /metrics` and `GET /health`: connections that
/// negotiated `h2` and their streams, open now and in all, and what each stream became.
package final class HTTP2Metrics: Sendable {
    /// What a stream became once its request head was read.
    package enum StreamKind: String, CaseIterable {
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
    /// The same counts, readable for `/health`, and whoever waits for them to reach a value.
    private let state = NIOLockedValueBox(State())

    /// What is open now: HTTP/2 connections, their streams, and the streams that are WebSockets.
    package struct Counts: Sendable, Equatable, CustomStringConvertible {
        package var connections = 0
        package var streams = 0
        package var webSockets = 0

        package var description: String {
            #"{"connections":\#(connections),"streams":\#(streams),"webSockets":\#(webSockets)}"#
        }
    }

    private struct State: DeferringWork {
        var counts = Counts()
        /// Who waits for the counts to reach a value (``wait(until:)``): woken at every change,
        /// each checks its own target again.
        var waiters = Waiters<Void>()
        var afterUnlock: [@Sendable () -> Void] = []
    }

    package init(factory: any MetricsFactory) {
        connectionsOpen = Meter(label: "duplex_http2_connections_open", factory: factory)
        connectionsTotal = Counter(label: "duplex_http2_connections_total", factory: factory)
        streamsOpen = Meter(label: "duplex_http2_streams_open", factory: factory)
        webSocketsOpen = Meter(label: "duplex_http2_websockets_open", factory: factory)
        streamsTotal = Dictionary(
            uniqueKeysWithValues: StreamKind.allCases.map {
                ($0, Counter(label: "duplex_http2_streams_total", dimensions: [("kind", $0.rawValue)], factory: factory))
            }
        )
    }

    package func connectionOpened() {
        connectionsTotal.increment()
        connectionsOpen.increment()
        change { $0.connections += 1 }
    }

    func connectionClosed() {
        connectionsOpen.decrement()
        change { $0.connections -= 1 }
    }

    func streamOpened() {
        streamsOpen.increment()
        change { $0.streams += 1 }
    }

    func streamClosed() {
        streamsOpen.decrement()
        change { $0.streams -= 1 }
    }

    /// A stream's request head was read and the stream became `kind`.
    package func served(_ kind: StreamKind) {
        streamsTotal[kind]?.increment()
        if kind == .webSocket {
            webSocketsOpen.increment()
            change { $0.webSockets += 1 }
        }
    }

    /// A WebSocket over HTTP/2 ended.
    func webSocketClosed() {
        webSocketsOpen.decrement()
        change { $0.webSockets -= 1 }
    }

    private func change(_ body: (inout Counts) -> Void) {
        state.locked { state in
            body(&state.counts)
            state.resume(state.waiters.takeAll(), with: .success(()))
        }
    }

    /// What is open now.
    package var counts: Counts { state.withLockedValue(\.counts) }

    /// `{"connections":N,"streams":N,"webSockets":N}`: open now.
    package var healthJSON: String { counts.description }

    /// Returns once the counts are `target` (at once if they are), or when the task is cancelled.
    /// The server counts a connection or stream closed as its close runs on the event loop, a
    /// moment after the peer sees it closed.
    package func wait(until target: Counts) async {
        var reached = false
        while !reached {
            do {
                try await state.wait(in: \.waiters) { state in
                    reached = state.counts == target
                    return reached ? .success(()) : nil
                }
            } catch {
                return  // cancelled
            }
        }
    }
}
