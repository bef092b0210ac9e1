import NIOConcurrencyHelpers
import NIOCore
package import NIOHTTP1
import NIOPosix

/// An HTTP server for SSE tests, on 127.0.0.1 and a free port, that answers each request as
/// scripted for its number (from 1), once the request's body has arrived, and records each request
/// (method, target, headers and body).
package final class ScriptedHTTPPeer: Sendable {
    /// One scripted answer.
    package struct Answer: Sendable {
        package var status: HTTPResponseStatus = .ok
        package var headers: [(String, String)] = [("Content-Type", "text/event-stream")]
        /// Body chunks, written one by one.
        package var chunks: [String] = []
        /// After the chunks: end the response, or stall (keep the connection open, send nothing).
        package var stall = false
        /// After the chunks: close the connection before the response's end (a drop).
        package var drop = false

        /// An answer: every property has a default.
        package init(
            status: HTTPResponseStatus = .ok,
            headers: [(String, String)] = [("Content-Type", "text/event-stream")],
            chunks: [String] = [],
            stall: Bool = false,
            drop: Bool = false
        ) {
            self.status = status
            self.headers = headers
            self.chunks = chunks
            self.stall = stall
            self.drop = drop
        }
    }

    /// A request as it arrived.
    package struct Request: Sendable {
        package var method: HTTPMethod
        package var uri: String
        package var headers: HTTPHeaders
        package var body: String
    }

    private let channel: any Channel
    package let port: Int
    private let requests = NIOLockedValueBox<[Request]>([])
    private let waiters = NIOLockedValueBox<[(count: Int, continuation: CheckedContinuation<Void, Never>)]>([])

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
    }

    /// The headers of every request so far, in order.
    package var requestHeaders: [HTTPHeaders] { requests.withLockedValue { $0.map(\.headers) } }

    /// Every request so far, in order.
    package var received: [Request] { requests.withLockedValue { $0 } }

    /// Returns once `count` requests have arrived. Wrap it in a timeout.
    package func waitForRequests(_ count: Int) async {
        await withCheckedContinuation { continuation in
            let ready = requests.withLockedValue { requests in
                if requests.count >= count { return true }
                waiters.withLockedValue { $0.append((count, continuation)) }
                return false
            }
            if ready { continuation.resume() }
        }
    }

    package static func start(_ script: @escaping @Sendable (Int) -> Answer) async throws -> ScriptedHTTPPeer {
        let box = NIOLockedValueBox<ScriptedHTTPPeer?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.configureHTTPServerPipeline()
                    try child.pipeline.syncOperations.addHandler(
                        AnswerHandler(
                            record: { request in
                                box.withLockedValue { $0 }?.record(request) ?? 0
                            }, script: script))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        let peer = ScriptedHTTPPeer(channel: channel)
        box.withLockedValue { $0 = peer }
        return peer
    }

    package func stop() async {
        try? await channel.close()
    }

    fileprivate func record(_ request: Request) -> Int {
        let (count, ready) = requests.withLockedValue { requests -> (Int, [CheckedContinuation<Void, Never>]) in
            requests.append(request)
            let count = requests.count
            let ready = waiters.withLockedValue { waiters in
                let done = waiters.filter { $0.count <= count }.map(\.continuation)
                waiters.removeAll { $0.count <= count }
                return done
            }
            return (count, ready)
        }
        for continuation in ready { continuation.resume() }
        return count
    }
}

private final class AnswerHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let record: @Sendable (ScriptedHTTPPeer.Request) -> Int
    let script: @Sendable (Int) -> ScriptedHTTPPeer.Answer
    private var request: ScriptedHTTPPeer.Request?

    init(record: @escaping @Sendable (ScriptedHTTPPeer.Request) -> Int, script: @escaping @Sendable (Int) -> ScriptedHTTPPeer.Answer) {
        self.record = record
        self.script = script
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            request = .init(method: head.method, uri: head.uri, headers: head.headers, body: "")
        case .body(let bytes):
            request?.body += String(buffer: bytes)
        case .end:
            guard let request else { return }
            self.request = nil
            answer(script(record(request)), context: context)
        }
    }

    private func answer(_ answer: ScriptedHTTPPeer.Answer, context: ChannelHandlerContext) {
        var headers = HTTPHeaders(answer.headers)
        headers.add(name: "Connection", value: "close")
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: answer.status, headers: headers))), promise: nil)
        for chunk in answer.chunks {
            context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: chunk)))), promise: nil)
        }
        context.flush()
        let channel = context.channel
        if answer.drop {
            channel.close(promise: nil)
        } else if !answer.stall {
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
        }
    }
}
