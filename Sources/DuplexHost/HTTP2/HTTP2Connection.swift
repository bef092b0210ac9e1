import DuplexSchema
import DuplexWire
import HummingbirdCore
package import NIOCore
import NIOHTTP2
package import NIOHTTPTypes
import NIOHTTPTypesHTTP2

/// The HTTP requests of one HTTP/2 connection's streams, in the order they came, for the
/// connection's task to serve with Hummingbird's responder. It ends when the connection
/// closes; it holds at most one entry per open stream, which the connection's
/// `DuplexServerHTTP2.maxConcurrentStreams` (`HTTP2Limits`) bounds.
package typealias HTTP2Streams = AsyncStream<NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>>

/// What the streams of one HTTP/2 connection share: how a WebSocket request is routed, the
/// compression offered, whether the server refuses requests, its metrics, and where HTTP
/// requests go (``HTTP2Streams``).
struct HTTP2Connection: Sendable {
    let route: DuplexChildChannel.Router
    let eventStreams: EventStreamServing
    let compression: PerMessageDeflate?
    let refusal: RefusalGate
    let metrics: ServerMetrics
    let streams: HTTP2Streams.Continuation

    /// Makes `channel`, whose TLS handshake chose `h2`, an HTTP/2 server connection with the
    /// limits of `settings`: swift-nio-http2's handler, announcing extended CONNECT, a
    /// ``HTTP2StreamRouter`` on each stream the client opens, and an ``HTTP2IdleMonitor``.
    /// - Returns: the connection's HTTP requests, for its task to serve.
    static func configure(
        _ channel: any Channel,
        settings: HTTP2Limits,
        firstStreamTimeout: Duration,
        route: @escaping DuplexChildChannel.Router,
        eventStreams: EventStreamServing,
        compression: PerMessageDeflate?,
        refusal: RefusalGate,
        metrics: ServerMetrics,
        registry: HTTP2ConnectionSet
    ) throws -> HTTP2Streams {
        let (streams, continuation) = HTTP2Streams.makeStream()
        let connection = HTTP2Connection(
            route: route, eventStreams: eventStreams, compression: compression, refusal: refusal, metrics: metrics, streams: continuation)
        var connectionConfiguration = NIOHTTP2Handler.ConnectionConfiguration()
        connectionConfiguration.initialSettings = [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: settings.maxConcurrentStreams),
            HTTP2Setting(parameter: .maxHeaderListSize, value: settings.maxHeaderListBytes),
            HTTP2Setting(parameter: .initialWindowSize, value: settings.streamWindowBytes),
            HTTP2Setting(parameter: .enableConnectProtocol, value: 1),
        ]
        connectionConfiguration.targetWindowSize = settings.streamWindowBytes * 4
        var streamConfiguration = NIOHTTP2Handler.StreamConfiguration()
        streamConfiguration.targetWindowSize = settings.streamWindowBytes
        let monitor = HTTP2IdleMonitor(
            idleTimeout: TimeAmount(settings.idleTimeout), firstStreamTimeout: TimeAmount(firstStreamTimeout), metrics: metrics.http2)
        let operations = channel.pipeline.syncOperations
        let loopBoundMonitor = NIOLoopBound(monitor, eventLoop: channel.eventLoop)
        _ = try operations.configureHTTP2Pipeline(
            mode: .server,
            connectionConfiguration: connectionConfiguration,
            streamConfiguration: streamConfiguration
        ) { stream in
            stream.eventLoop.makeCompletedFuture {
                if let id = try? stream.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID) {
                    loopBoundMonitor.value.opened(stream, id: id)
                }
                try stream.pipeline.syncOperations.addHandler(HTTP2FramePayloadToHTTPServerCodec())
                try stream.pipeline.syncOperations.addHandler(HTTP2StreamRouter(connection: connection))
            }
        }
        try operations.addHandler(monitor)
        registry.insert(monitor, of: channel)
        metrics.http2.connectionOpened()
        channel.closeFuture.whenComplete { _ in
            continuation.finish()
            metrics.http2.connectionClosed()
        }
        return streams
    }
}

/// The limits each HTTP/2 connection announces and keeps, with their defaults and their
/// bounds (`DuplexServerHTTP2` documents each for users, and holds one of these).
package struct HTTP2Limits: Sendable, Hashable {
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`.
    package var maxConcurrentStreams = 100
    /// `SETTINGS_MAX_HEADER_LIST_SIZE`.
    package var maxHeaderListBytes = 32 * 1024
    /// `SETTINGS_INITIAL_WINDOW_SIZE`; the connection's window is 4 times this.
    package var streamWindowBytes = 65_535
    /// How long a connection with no open stream is kept.
    package var idleTimeout: Duration = .seconds(60)

    /// The defaults.
    package init() {}

    /// Why these limits cannot be announced, naming the setting; nil when they can.
    package var invalidity: String? {
        guard (1...100_000).contains(maxConcurrentStreams) else {
            return "maxConcurrentStreams must be from 1 to 100000, not \(maxConcurrentStreams)"
        }
        guard (1024...16 * 1024 * 1024).contains(maxHeaderListBytes) else {
            return "maxHeaderListBytes must be from 1024 to 16 MiB, not \(maxHeaderListBytes)"
        }
        // The connection's window is 4 times a stream's, and HTTP/2 windows stop at 2^31 - 1.
        guard (1...(Int(Int32.max) / 4)).contains(streamWindowBytes) else {
            return "streamWindowBytes must be from 1 to \(Int(Int32.max) / 4), not \(streamWindowBytes)"
        }
        guard idleTimeout > .zero else { return "idleTimeout must be positive" }
        return nil
    }
}
