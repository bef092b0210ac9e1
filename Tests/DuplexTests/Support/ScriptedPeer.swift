import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket

/// A WebSocket server for tests, on 127.0.0.1 and a free port, whose behaviour is scripted per
/// connection: it can stop answering pings, drop connections, close with a given code, or pick
/// a subprotocol. It counts what it saw, so tests can assert on it.
final class ScriptedPeer: Sendable {
    struct Behaviour: Sendable {
        var answerPings = true
        var echo = true
        var subprotocol: String?
        /// Extra handshake response headers, such as a `Sec-WebSocket-Extensions` not offered.
        var extraHeaders: [(String, String)] = []
        /// Send this close frame right after the handshake.
        var closeOnConnect: (code: UInt16, reason: String)?
        /// Drop the TCP connection right after the handshake, with no close frame.
        var dropOnConnect = false
    }

    private let channel: any Channel
    let port: Int
    private let counters = NIOLockedValueBox(Counters())
    private let children = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])

    struct Counters {
        var connections = 0
        var pings = 0
        var pingsByConnection: [Int: Int] = [:]
        var messages: [String] = []
        var pingWaiters: [(connection: Int, count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    var connectionCount: Int { counters.withLockedValue { $0.connections } }
    var pingCount: Int { counters.withLockedValue { $0.pings } }

    /// How many pings arrived on connection `number` (from 1).
    func pingCount(onConnection number: Int) -> Int { counters.withLockedValue { $0.pingsByConnection[number] ?? 0 } }

    /// Returns once `count` pings have arrived on connection `number`. Wrap it in a timeout.
    func waitForPings(_ count: Int, onConnection number: Int) async {
        await withCheckedContinuation { continuation in
            let ready = counters.withLockedValue { counters -> Bool in
                if (counters.pingsByConnection[number] ?? 0) >= count { return true }
                counters.pingWaiters.append((number, count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }
    var receivedTexts: [String] { counters.withLockedValue { $0.messages } }

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
    }

    /// Starts a peer; `behaviour` gets the connection's number, from 1. With `tls`, it speaks
    /// wss with that context.
    static func start(
        tls: NIOSSLContext? = nil,
        _ behaviour: @escaping @Sendable (Int) -> Behaviour = { _ in Behaviour() }
    ) async throws -> ScriptedPeer {
        let box = NIOLockedValueBox<ScriptedPeer?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { child in
                guard let peer = box.withLockedValue({ $0 }) else { return child.close() }
                let number = peer.counters.withLockedValue { counters in
                    counters.connections += 1
                    return counters.connections
                }
                let script = behaviour(number)
                let upgrader = NIOWebSocketServerUpgrader(
                    shouldUpgrade: { channel, _ in
                        var headers = HTTPHeaders()
                        if let chosen = script.subprotocol { headers.add(name: "Sec-WebSocket-Protocol", value: chosen) }
                        for (name, value) in script.extraHeaders { headers.add(name: name, value: value) }
                        return channel.eventLoop.makeSucceededFuture(headers)
                    },
                    upgradePipelineHandler: { channel, _ in
                        channel.eventLoop.makeCompletedFuture {
                            try channel.pipeline.syncOperations.addHandler(PeerHandler(peer: peer, script: script, number: number))
                        }
                    }
                )
                if let tls {
                    do {
                        try child.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls))
                    } catch {
                        return child.eventLoop.makeFailedFuture(error)
                    }
                }
                return child.pipeline.configureHTTPServerPipeline(withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }))
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        let peer = ScriptedPeer(channel: channel)
        box.withLockedValue { $0 = peer }
        return peer
    }

    /// Drops every open connection, with no close frame.
    func dropAll() {
        for child in children.withLockedValue({ Array($0.values) }) { child.close(promise: nil) }
    }

    /// Stops listening and drops every connection.
    func stop() async {
        dropAll()
        try? await channel.close()
    }

    fileprivate func opened(_ channel: any Channel) {
        children.withLockedValue { $0[ObjectIdentifier(channel)] = channel }
    }

    fileprivate func closed(_ channel: any Channel) {
        children.withLockedValue { _ = $0.removeValue(forKey: ObjectIdentifier(channel)) }
    }

    fileprivate func count(ping connection: Int? = nil, text: String? = nil) {
        let ready = counters.withLockedValue { counters -> [CheckedContinuation<Void, Never>] in
            if let text { counters.messages.append(text) }
            guard let connection else { return [] }
            counters.pings += 1
            counters.pingsByConnection[connection, default: 0] += 1
            let reached = counters.pingsByConnection[connection]!
            let done = counters.pingWaiters.filter { $0.connection == connection && $0.count <= reached }
            counters.pingWaiters.removeAll { $0.connection == connection && $0.count <= reached }
            return done.map(\.continuation)
        }
        for continuation in ready { continuation.resume() }
    }
}

private final class PeerHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    let peer: ScriptedPeer
    let script: ScriptedPeer.Behaviour
    let number: Int

    init(peer: ScriptedPeer, script: ScriptedPeer.Behaviour, number: Int) {
        self.peer = peer
        self.script = script
        self.number = number
    }

    func handlerAdded(context: ChannelHandlerContext) {
        peer.opened(context.channel)
        if script.dropOnConnect {
            context.close(promise: nil)
        } else if let (code, reason) = script.closeOnConnect {
            var payload = context.channel.allocator.buffer(capacity: 2 + reason.utf8.count)
            payload.writeInteger(code)
            payload.writeString(reason)
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)), promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        peer.closed(context.channel)
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let payload = frame.unmaskedData
        switch frame.opcode {
        case .ping:
            peer.count(ping: number)
            if script.answerPings {
                context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: payload)), promise: nil)
            }
        case .text:
            let text = String(buffer: payload)
            peer.count(text: text)
            if script.echo {
                context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: payload)), promise: nil)
            }
        case .binary:
            if script.echo {
                context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .binary, data: payload)), promise: nil)
            }
        case .connectionClose:
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload))).whenComplete { _ in
                channel.close(promise: nil)
            }
        default:
            break
        }
    }
}
