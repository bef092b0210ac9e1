import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOSOCKS

/// Opens a tunnel to the target through a proxy on a channel connected to that proxy, with
/// NIO's handlers (NIOExtras' CONNECT handler, NIOSOCKS), and takes them out of the pipeline once
/// the tunnel is open: what follows (TLS, the WebSocket handshake) talks to the target.
enum ProxyTunnel {
    /// Installs the tunnel's handlers; the future succeeds once the tunnel is open.
    static func open(_ route: Proxy.Route, on channel: any Channel, to host: String, port: Int, deadline: NIODeadline) throws -> EventLoopFuture<Void>
    {
        let operations = channel.pipeline.syncOperations
        switch route {
        case .http(_, _, let username, let password):
            var headers = HTTPHeaders()
            if let username {
                let credentials = Data("\(username):\(password ?? "")".utf8).base64EncodedString()
                headers.add(name: "Proxy-Authorization", value: "Basic \(credentials)")
            }
            let encoder = HTTPRequestEncoder()
            let decoder = ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .forwardBytes))
            let status = ResponseStatusRecorder()
            let promise = channel.eventLoop.makePromise(of: Void.self)
            let connect = NIOHTTP1ProxyConnectHandler(targetHost: host, targetPort: port, headers: headers, deadline: deadline, promise: promise)
            try operations.addHandler(encoder)
            try operations.addHandler(decoder)
            try operations.addHandler(status)
            try operations.addHandler(connect)
            let authenticated = username != nil
            // The CONNECT handler and the recorder take themselves out once the proxy's head has
            // passed; the codec follows them, on the event loop.
            return promise.futureResult.flatMapErrorThrowing { error in
                throw Self.describe(error, status: status.status.withLockedValue { $0 }, authenticated: authenticated, target: "\(host):\(port)")
            }.assumeIsolated().flatMap {
                channel.pipeline.syncOperations.removeHandler(decoder).assumeIsolated().flatMap {
                    channel.pipeline.syncOperations.removeHandler(encoder)
                }.nonisolated()
            }.nonisolated()
        case .socks5:
            let address: SOCKSAddress
            if let ip = try? SocketAddress(ipAddress: host, port: port) {
                address = .address(ip)
            } else {
                address = .domain(host, port: port)
            }
            let socks = SOCKSClientHandler(targetAddress: address)
            let watcher = SOCKSEstablishedWatcher(promise: channel.eventLoop.makePromise(of: Void.self))
            try operations.addHandler(socks)
            try operations.addHandler(watcher)
            return watcher.promise.futureResult.flatMapErrorThrowing { error in
                throw WebSocketError(.proxyFailed, "the SOCKS5 proxy did not open a tunnel to \(host):\(port): \(Self.describeSOCKS(error))")
            }.assumeIsolated().flatMap {
                channel.pipeline.syncOperations.removeHandler(watcher).assumeIsolated().flatMap {
                    channel.pipeline.syncOperations.removeHandler(socks)
                }.nonisolated()
            }.nonisolated()
        }
    }

    private static func describe(_ error: any Error, status: Int?, authenticated: Bool, target: String) -> WebSocketError {
        switch status {
        case let code? where code == 407 || (code == 401 && authenticated):
            return WebSocketError(
                .proxyFailed,
                authenticated
                    ? "the proxy refused the user and password (HTTP \(code))"
                    : "the proxy requires authentication (HTTP 407): give a user and password in the proxy URL (http://user:password@host:port)",
                status: code
            )
        case let code? where code < 200 || code >= 300:
            let meaning =
                switch code {
                case 403: "refused the tunnel to \(target)"
                case 502, 504: "could not reach \(target)"
                default: "did not open a tunnel to \(target)"
                }
            return WebSocketError(.proxyFailed, "the proxy \(meaning) (HTTP \(code))", status: code)
        default:
            // The error may quote the proxy's answer: printable ASCII only, and not much of it.
            let said = String(
                String(describing: error).unicodeScalars.filter { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F }.prefix(200).map(Character.init))
            return WebSocketError(.proxyFailed, "the proxy did not open a tunnel to \(target): \(said)")
        }
    }

    /// RFC 1928's meaning of a SOCKS5 reply.
    static func socksReply(_ reply: SOCKSServerReply) -> String {
        let meaning: String =
            switch reply {
            case .serverFailure: "general failure"
            case .notAllowed: "not allowed by its rules"
            case .networkUnreachable: "network unreachable"
            case .hostUnreachable: "host unreachable"
            case .refused: "connection refused by the target"
            case .ttlExpired: "TTL expired"
            case .commandUnsupported: "command not supported"
            case .addressUnsupported: "address type not supported"
            default: "reply \(reply.value)"
            }
        return "the proxy answered \(meaning) (SOCKS5 reply \(reply.value))"
    }

    private static func describeSOCKS(_ error: any Error) -> String {
        if let failed = error as? SOCKSError.ConnectionFailed {
            return socksReply(failed.reply)
        }
        if error is SOCKSError.NoValidAuthenticationMethod {
            return "the proxy requires authentication, which is not supported"
        }
        if let error = error as? ChannelError, error == .eof || error == .ioOnClosedChannel {
            return "the proxy closed the connection"
        }
        return "\(error)"
    }
}

/// Completes its promise when NIOSOCKS says the tunnel is open, or fails it with the error or
/// the connection's end that came first.
private final class SOCKSEstablishedWatcher: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = NIOAny

    let promise: EventLoopPromise<Void>

    init(promise: EventLoopPromise<Void>) {
        self.promise = promise
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is SOCKSProxyEstablishedEvent {
            promise.succeed(())
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise.fail(error)
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.fail(ChannelError.eof)
        context.fireChannelInactive()
    }
}
