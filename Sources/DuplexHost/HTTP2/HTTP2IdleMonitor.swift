package import NIOCore
package import NIOHTTP2

/// Counts an HTTP/2 connection's open streams, sends GOAWAY when asked (``goAway()``: a fault,
/// a graceful shutdown) and closes the connection once its streams have ended, and does the same
/// once it has had no stream for `DuplexServerHTTP2.idleTimeout` (`HTTP2Limits`): what HTTP/1.1's idle timeout does for a
/// keep-alive connection. A new connection that opens no stream within the request head timeout
/// (a client that completes the TLS handshake and sends nothing) is closed the same way. It also closes the connection when the client closes its
/// side.
package final class HTTP2IdleMonitor: ChannelInboundHandler {
    package typealias InboundIn = HTTP2Frame
    package typealias OutboundOut = HTTP2Frame

    private let idleTimeout: TimeAmount
    /// How long a new connection may go without opening its first stream: what HTTP/1.1's
    /// request head timeout is for a silent connection.
    private let firstStreamTimeout: TimeAmount
    private var sawStream = false
    private let metrics: HTTP2Metrics
    private var openStreams = 0
    /// The highest stream the client opened: GOAWAY's last stream.
    private var lastStream = HTTP2StreamID(0)
    private var timer: Scheduled<Void>?
    /// GOAWAY was sent: the connection closes when its last stream does.
    private var goingAway = false
    private var context: ChannelHandlerContext?

    package init(idleTimeout: TimeAmount, firstStreamTimeout: TimeAmount, metrics: HTTP2Metrics) {
        self.idleTimeout = idleTimeout
        self.firstStreamTimeout = min(firstStreamTimeout, idleTimeout)
        self.metrics = metrics
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        scheduleClose()
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        timer = nil
        self.context = nil
    }

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // The client closed its side (the server allows half-closure for HTTP/1.1): an HTTP/2
        // connection has no use for a half, so it is closed, and its streams with it.
        if let event = event as? ChannelEvent, event == .inputClosed {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// swift-nio-http2 hit an error on the connection: on a connection error it has sent GOAWAY
    /// and leaves the close to the application, which must not let the connection linger until
    /// a timeout. The connection is closed once what was written is flushed (GOAWAY, or a stream
    /// error's RST_STREAM), as swift-nio-http2's example server does.
    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.flush()
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.eventLoop.execute { loopBound.value.close(promise: nil) }
        context.fireErrorCaught(error)
    }

    /// The client opened `stream`, with this id: it is counted until its channel closes.
    package func opened(_ stream: any Channel, id: HTTP2StreamID) {
        openStreams += 1
        sawStream = true
        lastStream = max(lastStream, id)
        metrics.streamOpened()
        timer?.cancel()
        timer = nil
        let loopBound = NIOLoopBound(self, eventLoop: stream.eventLoop)
        stream.closeFuture.whenComplete { _ in loopBound.value.streamClosed() }
    }

    private func streamClosed() {
        openStreams -= 1
        metrics.streamClosed()
        guard openStreams == 0 else { return }
        if goingAway {
            context?.close(promise: nil)
        } else {
            scheduleClose()
        }
    }

    /// Sends GOAWAY (no error, the last stream the client opened): the client opens no new
    /// stream here, the streams it has run to their end, and the connection then closes.
    package func goAway() {
        guard let context, !goingAway else { return }
        goingAway = true
        timer?.cancel()
        timer = nil
        let goAway = HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: lastStream, errorCode: .noError, opaqueData: nil))
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(goAway)).whenComplete { _ in
            // Once GOAWAY is on its way: a close at once could drop it.
            let monitor = loopBound.value
            if monitor.openStreams == 0 { monitor.context?.close(promise: nil) }
        }
    }

    private func scheduleClose() {
        guard let context else { return }
        timer?.cancel()
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: sawStream ? idleTimeout : firstStreamTimeout) {
            loopBound.value.closeIdle()
        }
    }

    /// No stream for the idle timeout: GOAWAY, then close.
    private func closeIdle() {
        timer = nil
        guard openStreams == 0 else { return }
        goAway()
    }
}
