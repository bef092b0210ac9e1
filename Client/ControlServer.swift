import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// The control endpoint of `duplex proxy`: a small HTTP/1.1 server on SwiftNIO's HTTP codec that
/// answers every request with the JSON its handler returns, keep-alive as the client asks.
enum ControlServer {
    /// A request as the handler sees it: method, path, and the query's parameters (decoded).
    struct Request: Sendable {
        var method: HTTPMethod
        var path: String
        var query: [(String, String)]
    }

    /// A status and a JSON body.
    struct Reply: Sendable {
        var status: HTTPResponseStatus
        var json: Data
    }

    /// Listens on `host`:`port` (0 picks a free port) and answers with `handle`; the channel's
    /// close future ends when it is closed.
    static func start(host: String, port: Int, handle: @escaping @Sendable (Request) -> Reply) async throws -> any Channel {
        try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(Handler(handle: handle))
                }
            }
            .bind(host: host, port: port)
            .get()
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        let handle: @Sendable (Request) -> Reply
        private var head: HTTPRequestHead?

        init(handle: @escaping @Sendable (Request) -> Reply) {
            self.handle = handle
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                self.head = head
            case .body:
                break  // the control requests carry their arguments in the query
            case .end:
                guard let head else { return }
                self.head = nil
                let components = URLComponents(string: head.uri)
                let query = (components?.queryItems ?? []).map { ($0.name, $0.value ?? "") }
                let reply = handle(Request(method: head.method, path: components?.path ?? head.uri, query: query))
                var headers = HTTPHeaders()
                headers.add(name: "Content-Type", value: "application/json; charset=utf-8")
                headers.add(name: "Content-Length", value: "\(reply.json.count)")
                let keepAlive = head.isKeepAlive
                if !keepAlive { headers.add(name: "Connection", value: "close") }
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: reply.status, headers: headers))), promise: nil)
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: reply.json)))), promise: nil)
                let written = context.writeAndFlush(wrapOutboundOut(.end(nil)))
                if !keepAlive {
                    let context = NIOLoopBound(context, eventLoop: context.eventLoop)
                    written.whenComplete { _ in context.value.close(promise: nil) }
                }
            }
        }
    }
}
