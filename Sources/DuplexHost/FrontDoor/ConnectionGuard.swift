import Hummingbird
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
package import NIOCore
import NIOTLS

/// The server's front door: the first handler of every connection, in front of the HTTP decoder.
///
/// It reads each request head itself, before Hummingbird or swift-nio see it, and answers what
/// they would otherwise leave unanswered or hold forever:
/// - a connection past `DuplexServerConfiguration.maxConnections` gets 503 and is closed;
/// - a request head not complete within `DuplexServerConfiguration.requestHeadTimeout` (a silent
///   connection, a slowloris, headers never finished) is closed, with 408 when some bytes came;
/// - a request line over `DuplexServerConfiguration.maxRequestLineBytes` gets 414, a head over
///   `DuplexServerConfiguration.maxRequestHeadBytes` or with more than
///   `DuplexServerConfiguration.maxHeaderFields` fields gets 431;
/// - a request line of another HTTP version than 1.0 or 1.1 (the HTTP/2 preface `PRI *
///   HTTP/2.0` among them) gets 505; a request asking to upgrade to `h2c` is served as HTTP/1.1,
///   its `Upgrade` and `HTTP2-Settings` fields left out;
/// - a malformed WebSocket upgrade gets 400 (no or a bad `Sec-WebSocket-Key`, not GET, not
///   HTTP/1.1, no `Connection: Upgrade`) or 426 with `Sec-WebSocket-Version: 13` (another version),
///   as RFC 6455 sections 4.2.1 and 4.4 require;
/// - while the server refuses connections (a chaos fault), any request whose path does not start
///   with `/_chaos/` gets 503;
/// - once the server has begun to stop, a new request is closed unanswered, as it would be a
///   moment later by a server no longer listening.
///
/// After a WebSocket upgrade request it passes every byte on: the connection's
/// ``EventLoopWebSocketHandler`` checks the frames (masking included) and removes the guard once
/// the connection is upgraded. On a plain HTTP connection it skips each request's
/// `Content-Length` body and checks the next head the same way; a chunked request body makes it
/// step aside.
package final class ConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = ByteBuffer
    package typealias OutboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer

    /// The limits the guard enforces.
    package struct Limits: Sendable {
        package var requestHeadTimeout: TimeAmount
        package var maxRequestLineBytes: Int
        package var maxRequestHeadBytes: Int
        package var maxHeaderFields: Int

        /// The limits, each as its property says.
        package init(requestHeadTimeout: TimeAmount, maxRequestLineBytes: Int, maxRequestHeadBytes: Int, maxHeaderFields: Int) {
            self.requestHeadTimeout = requestHeadTimeout
            self.maxRequestLineBytes = maxRequestLineBytes
            self.maxRequestHeadBytes = maxRequestHeadBytes
            self.maxHeaderFields = maxHeaderFields
        }
    }

    private enum Mode {
        /// Reading a request head, which ends with an empty line.
        case requestHead
        /// Skipping this many bytes of a request body.
        case body(Int)
        /// A WebSocket upgrade was asked for: everything after its head is the handler's.
        case upgrading
        /// The connection is being closed; nothing more is forwarded.
        case closed
    }

    private let limits: Limits
    private let refusal: RefusalGate
    private let metrics: ServerMetrics
    private var mode: Mode = .requestHead
    /// The head being read: held back until it is complete and checked.
    private var head: [UInt8] = []
    private var deadline: Scheduled<Void>?
    private var receivedAny = false
    /// How many request heads were passed on to the HTTP decoder.
    private var forwardedRequests = 0

    /// Whether the connection is within the server's connection limit; if not, it is answered 503.
    private let admitted: Bool

    package init(limits: Limits, refusal: RefusalGate, metrics: ServerMetrics, admitted: Bool) {
        self.limits = limits
        self.refusal = refusal
        self.metrics = metrics
        self.admitted = admitted
    }

    package func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { start(context: context) }
    }

    package func channelActive(context: ChannelHandlerContext) {
        start(context: context)
        context.fireChannelActive()
    }

    private func start(context: ChannelHandlerContext) {
        guard case .requestHead = mode, deadline == nil, !receivedAny else { return }
        if admitted {
            startDeadline(context: context)
        } else {
            answer(
                Failure(
                    status: 503, reason: "Service Unavailable", message: "the server is at its connection limit", headers: [("Retry-After", "1")]),
                context: context)
        }
    }

    package func handlerRemoved(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
    }

    package func channelInactive(context: ChannelHandlerContext) {
        deadline?.cancel()
        deadline = nil
        context.fireChannelInactive()
    }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        var index = buffer.readerIndex
        let end = buffer.writerIndex
        var forwardFrom = index
        var remove = false
        receivedAny = true
        scan: while index < end {
            switch mode {
            case .closed:
                return
            case .requestHead:
                if head.isEmpty, deadline == nil { startDeadline(context: context) }
                forward(buffer, from: forwardFrom, to: index, context: context)
                let found = appendToHead(buffer, from: &index, end: end)
                forwardFrom = index  // the head's bytes are held in `head`, not forwarded from here
                if let failure = checkLimits(complete: found) {
                    answer(failure, context: context)
                    return
                }
                guard found else { break scan }
                deadline?.cancel()
                deadline = nil
                let request = RequestHead(bytes: head)
                head = []
                if refusal.isStopping {
                    // The server is going away: close as a server that stopped listening a moment
                    // earlier would have, so that every client (an EventSource too) comes back.
                    mode = .closed
                    context.close(promise: nil)
                    return
                }
                if let failure = check(request) {
                    answer(failure, context: context)
                    return
                }
                context.fireChannelRead(wrapInboundOut(context.channel.allocator.buffer(bytes: request.forwardedBytes)))
                forwardedRequests += 1
                if request.asksForWebSocket {
                    mode = .upgrading
                    break scan
                } else if request.isChunked {
                    remove = true
                    break scan
                } else {
                    mode = request.contentLength > 0 ? .body(request.contentLength) : .requestHead
                }
            case .body(let remaining):
                let taken = min(remaining, end - index)
                index += taken
                mode = taken == remaining ? .requestHead : .body(remaining - taken)
            case .upgrading:
                break scan
            }
        }
        forward(buffer, from: forwardFrom, to: end, context: context)
        if remove {
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    private func forward(_ buffer: ByteBuffer, from start: Int, to end: Int, context: ChannelHandlerContext) {
        guard end > start, let slice = buffer.getSlice(at: start, length: end - start) else { return }
        context.fireChannelRead(wrapInboundOut(slice))
    }

    // MARK: Reading the head

    /// Appends bytes to the head until it ends; returns whether it did. `index` moves past them.
    private func appendToHead(_ buffer: ByteBuffer, from index: inout Int, end: Int) -> Bool {
        // Room for one byte past the limit, so that an over-long head is seen as such.
        let room = limits.maxRequestHeadBytes + 1 - head.count
        let available = min(end - index, max(room, 0))
        let found: Int? = buffer.withUnsafeReadableBytes { raw in
            let base = index - buffer.readerIndex
            for offset in 0..<available {
                let byte = raw[base + offset]
                head.append(byte)
                // A head ends with CRLF CRLF, or LF LF as lenient parsers accept.
                if byte == 0x0A, head.count >= 2 {
                    let count = head.count
                    if head[count - 2] == 0x0A || (count >= 4 && head[count - 2] == 0x0D && head[count - 3] == 0x0A) {
                        // A head of only blank lines is not a request: RFC 9112 says to ignore
                        // empty lines before the request line.
                        if head.allSatisfy({ $0 == 0x0D || $0 == 0x0A }) {
                            head.removeAll(keepingCapacity: true)
                            continue
                        }
                        return offset + 1
                    }
                }
            }
            return nil
        }
        index += found ?? available
        return found != nil
    }

    /// A limit the head breaks, if any, judged on what has arrived so far.
    private func checkLimits(complete: Bool) -> Failure? {
        let lineEnd = head.firstIndex(of: 0x0A)
        if (lineEnd ?? head.count) > limits.maxRequestLineBytes {
            return Failure(status: 414, reason: "URI Too Long", message: "the request line is longer than \(limits.maxRequestLineBytes) bytes")
        }
        if head.count > limits.maxRequestHeadBytes {
            return Failure(
                status: 431, reason: "Request Header Fields Too Large", message: "the request head is larger than \(limits.maxRequestHeadBytes) bytes"
            )
        }
        var lines = 0
        for byte in head where byte == 0x0A { lines += 1 }
        // The request line and the final empty line are not fields.
        if lines - (complete ? 2 : 1) > limits.maxHeaderFields {
            return Failure(
                status: 431, reason: "Request Header Fields Too Large", message: "the request has more than \(limits.maxHeaderFields) header fields")
        }
        return nil
    }

    /// What the guard answers about a complete head, or nil to let it through.
    private func check(_ request: RequestHead) -> Failure? {
        guard request.isWellFormed else {
            return Failure(status: 400, reason: "Bad Request", message: "the request line is malformed")
        }
        // HTTP/1.0 and 1.1 only: the HTTP decoder would hold an HTTP/2 preface (`PRI *
        // HTTP/2.0`, as `curl --http2-prior-knowledge` sends it) or another version unanswered.
        guard request.version == "HTTP/1.1" || request.version == "HTTP/1.0" else {
            return Failure(
                status: 505, reason: "HTTP Version Not Supported",
                message: "\(request.versionShown) is not spoken here: this listener speaks HTTP/1.1 (HTTP/2 needs TLS, chosen by ALPN)")
        }

        if refusal.refuses(request.path) {
            return Failure(
                status: 503, reason: "Service Unavailable", message: "the server is refusing new connections (chaos)", headers: [("Retry-After", "1")]
            )
        }
        guard request.asksForWebSocket else { return nil }
        return request.webSocketHandshakeFailure
    }

    // MARK: Answers

    /// An answer that ends the connection.
    package struct Failure {
        package var status: Int
        package var reason: String
        package var message: String
        package var headers: [(String, String)] = []
    }

    private func answer(_ failure: Failure, context: ChannelHandlerContext) {
        metrics.refused(status: failure.status)
        mode = .closed
        head = []
        deadline?.cancel()
        deadline = nil
        if forwardedRequests > 0 {
            // Responses to earlier requests may still be on their way: the answer must come after
            // them, so it goes through the HTTP server as a request of its own, in order.
            let refused = "GET \(RouteTable.Route.refusedPath)/\(failure.status) HTTP/1.1\r\nHost: duplex-server\r\nConnection: close\r\n\r\n"
            context.fireChannelRead(wrapInboundOut(context.channel.allocator.buffer(string: refused)))
            return
        }
        let body = #"{"error":"\#(failure.message)"}"#
        var text =
            "HTTP/1.1 \(failure.status) \(failure.reason)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n"
        for (name, value) in failure.headers { text += "\(name): \(value)\r\n" }
        text += "\r\n" + body
        context.writeAndFlush(wrapOutboundOut(context.channel.allocator.buffer(string: text)), promise: nil)
        lingeringClose(context: context)
    }

    /// Closes the connection without losing the answer just written: closing a socket that still
    /// has unread input makes the kernel send a reset, which can destroy the answer before the
    /// peer reads it. So the write side is shut first, input is read and dropped until the peer
    /// closes, and the connection is closed for good after at most ``lingerTime``.
    private func lingeringClose(context: ChannelHandlerContext) {
        let channel = context.channel
        channel.close(mode: .output, promise: nil)
        channel.eventLoop.scheduleTask(in: Self.lingerTime) { channel.close(promise: nil) }
    }

    /// How long a closing connection's input is drained before it is closed anyway.
    private static let lingerTime = TimeAmount.seconds(2)

    package func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? TLSUserEvent, case .handshakeCompleted(negotiatedProtocol: "h2") = event {
            // HTTP/2 keeps its own limits (HTTP2Connection, HTTP2StreamRouter): the guard's are
            // HTTP/1.1's. A connection it already refused (503 past the connection limit) is
            // closing: it is not handed on.
            if case .closed = mode { return }
            deadline?.cancel()
            deadline = nil
            context.fireUserInboundEventTriggered(event)
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
            return
        }
        // The peer closed its side while the guard was draining it: close ours.
        if case .closed = mode, let event = event as? ChannelEvent, event == .inputClosed {
            context.close(promise: nil)
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    private func startDeadline(context: ChannelHandlerContext) {
        deadline?.cancel()
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        deadline = context.eventLoop.scheduleTask(in: limits.requestHeadTimeout) {
            let (handler, context) = loopBound.value
            handler.deadline = nil
            guard case .requestHead = handler.mode else { return }
            if handler.receivedAny {
                handler.answer(
                    Failure(
                        status: 408, reason: "Request Timeout",
                        message: "the request head did not arrive within \(handler.limits.requestHeadTimeout.nanoseconds / 1_000_000) ms"),
                    context: context
                )
            } else {
                handler.mode = .closed
                context.close(promise: nil)
            }
        }
    }

}
