import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP2

/// One HTTP/2 connection a client's WebSockets share (``HTTP2ClientPool``): swift-nio-http2's
/// client pipeline on a channel that negotiated `h2`, with the server's first SETTINGS read.
struct HTTP2ClientConnection: Sendable {
    let channel: any Channel
    let multiplexer: NIOHTTP2Handler.StreamMultiplexer
    /// Whether the server announced `SETTINGS_ENABLE_CONNECT_PROTOCOL` (RFC 8441).
    let extendedConnect: Bool
    /// Succeeds when the server sends GOAWAY.
    let goAway: EventLoopFuture<Void>
    /// The last stream the server's GOAWAY said it would process (the lowest, if it sent more
    /// than one); nil before any.
    let lastProcessed: NIOLockedValueBox<HTTP2StreamID?>

    /// Whether a stream that failed with `error` was never acted on by the server, so that its
    /// request may be sent again on another connection (RFC 9113 section 8.7): it was refused
    /// (`REFUSED_STREAM`), its number is above the last one a GOAWAY promised to process, or it
    /// was opened after the GOAWAY arrived.
    func didNotProcess(_ error: any Error) -> Bool {
        switch error {
        case is NIOHTTP2Errors.CreatedStreamAfterGoaway:
            return true
        case let closed as NIOHTTP2Errors.StreamClosed:
            if closed.errorCode == .refusedStream { return true }
            guard let last = lastProcessed.withLockedValue({ $0 }) else { return false }
            return closed.streamID > last
        default:
            return false
        }
    }

    /// What stops a connection from being used over HTTP/2.
    struct Unavailable: Error {
        enum Missing { case http2, extendedConnect }
        var missing: Missing
        var reason: String
    }

    /// Makes `channel`, once TLS is established, an HTTP/2 client connection, and waits for the
    /// server's SETTINGS.
    /// - Throws: ``Unavailable`` when ALPN did not choose `h2`.
    /// Its streams buffer writes up to `waterMark`: those of the socket that opened it.
    static func configure(_ channel: any Channel, negotiated: String?, waterMark: ChannelOptions.Types.WriteBufferWaterMark) throws
        -> EventLoopFuture<HTTP2ClientConnection>
    {
        guard negotiated == "h2" else {
            throw Unavailable(missing: .http2, reason: "the server did not negotiate HTTP/2 (ALPN chose \(negotiated ?? "nothing"))")
        }
        let monitor = HTTP2ClientMonitor(eventLoop: channel.eventLoop)
        let operations = channel.pipeline.syncOperations
        var streamConfiguration = NIOHTTP2Handler.StreamConfiguration()
        streamConfiguration.outboundBufferSizeHighWatermark = waterMark.high
        streamConfiguration.outboundBufferSizeLowWatermark = waterMark.low
        let multiplexer = try operations.configureHTTP2Pipeline(
            mode: .client,
            connectionConfiguration: .init(),
            streamConfiguration: streamConfiguration
        ) { pushed in
            // A server may not open streams to a client that disabled push.
            pushed.close()
        }
        try operations.addHandler(monitor)
        let goAway = monitor.goAway.futureResult
        let lastProcessed = monitor.lastProcessed
        return monitor.settings.futureResult.map { settings in
            HTTP2ClientConnection(
                channel: channel,
                multiplexer: multiplexer,
                extendedConnect: settings.contains(HTTP2Setting(parameter: .enableConnectProtocol, value: 1)),
                goAway: goAway,
                lastProcessed: lastProcessed
            )
        }
    }
}

/// Reads the connection-level frames the client acts on: the server's first SETTINGS, and GOAWAY.
private final class HTTP2ClientMonitor: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame

    let settings: EventLoopPromise<HTTP2Settings>
    let goAway: EventLoopPromise<Void>
    let lastProcessed = NIOLockedValueBox<HTTP2StreamID?>(nil)

    init(eventLoop: any EventLoop) {
        settings = eventLoop.makePromise()
        goAway = eventLoop.makePromise()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data).payload {
        case .settings(.settings(let values)): settings.succeed(values)
        case .goAway(let last, _, _):
            lastProcessed.withLockedValue { $0 = min($0 ?? last, last) }
            goAway.succeed()
        default: break
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        settings.fail(ChannelError.eof)
        // A closed connection takes no stream either: for the pool, the same as GOAWAY.
        goAway.succeed()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        settings.fail(ChannelError.eof)
        goAway.succeed()
    }
}
