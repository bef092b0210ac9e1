import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
package import NIOSSL
package import NIOWebSocket

/// A WebSocket server for tests, on 127.0.0.1 and a free port, whose behaviour is scripted per
/// connection: it can stop answering pings, drop connections, close with a given code, or pick
/// a subprotocol. It counts what it saw, so tests can assert on it.
package final class ScriptedPeer: Sendable {
    package struct Behaviour: Sendable {
        package var answerPings = true
        package var echo = true
        package var subprotocol: String?
        /// Extra handshake response headers, such as a `Sec-WebSocket-Extensions` not offered.
        package var extraHeaders: [(String, String)] = []
        /// Send this close frame right after the handshake.
        package var closeOnConnect: (code: UInt16, reason: String)?
        /// Drop the TCP connection right after the handshake, with no close frame.
        package var dropOnConnect = false
        /// Drop the TCP connection once this many text messages arrived on it.
        package var dropAfterTexts: Int?
        /// Right after the handshake, send this many text messages `"N:xxx…"` of `bytes` bytes,
        /// as fast as the channel stays writable (so TCP backpressure holds it back).
        package var flood: (count: Int, bytes: Int)?
        /// Read nothing after the handshake until ``ScriptedPeer/releaseReads()``. The kernel
        /// still takes what fits in the receive buffer (128 KiB by default on Linux).
        package var holdReads = false
        /// Frames written as they are right after the handshake, in one write (a compressed one,
        /// say, or a message and a bad frame the client reads together).
        package var framesOnConnect: [WebSocketFrame] = []

        /// A peer that answers pings and echoes, unless told otherwise: every property has a default.
        package init(
            answerPings: Bool = true,
            echo: Bool = true,
            subprotocol: String? = nil,
            extraHeaders: [(String, String)] = [],
            closeOnConnect: (code: UInt16, reason: String)? = nil,
            dropOnConnect: Bool = false,
            dropAfterTexts: Int? = nil,
            flood: (count: Int, bytes: Int)? = nil,
            holdReads: Bool = false,
            framesOnConnect: [WebSocketFrame] = []
        ) {
            self.answerPings = answerPings
            self.echo = echo
            self.subprotocol = subprotocol
            self.extraHeaders = extraHeaders
            self.closeOnConnect = closeOnConnect
            self.dropOnConnect = dropOnConnect
            self.dropAfterTexts = dropAfterTexts
            self.flood = flood
            self.holdReads = holdReads
            self.framesOnConnect = framesOnConnect
        }
    }

    private let channel: any Channel
    package let port: Int
    private let counters = NIOLockedValueBox(Counters())
    private let children = NIOLockedValueBox<[ObjectIdentifier: any Channel]>([:])

    package struct Counters {
        package var connections = 0
        package var pings = 0
        package var pingsByConnection: [Int: Int] = [:]
        package var messages: [String] = []
        package var pingWaiters: [(connection: Int, count: Int, continuation: CheckedContinuation<Void, Never>)] = []
        package var textWaiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
        /// Times a flooding connection found its channel not writable.
        package var heldBack = 0
        package var flooded = 0
        package var heldBackWaiters: [CheckedContinuation<Void, Never>] = []
    }

    /// Returns once a flooding connection was held back by TCP (its channel became unwritable).
    /// Wrap it in a timeout.
    package func waitUntilHeldBack() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ready = counters.withLockedValue { counters -> Bool in
                    if counters.heldBack > 0 || Task.isCancelled { return true }
                    counters.heldBackWaiters.append(continuation)
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            wakeAll()
        }
    }

    /// Wakes every waiter: its task was cancelled (a test timed out).
    private func wakeAll() {
        let waiters = counters.withLockedValue { counters in
            defer {
                counters.heldBackWaiters = []
                counters.textWaiters = []
            }
            return counters.heldBackWaiters + counters.textWaiters.map(\.continuation)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// How many messages the flooding connections wrote, in all.
    package var floodedCount: Int { counters.withLockedValue { $0.flooded } }

    fileprivate func countFlooded(_ count: Int) {
        counters.withLockedValue { $0.flooded += count }
    }

    /// How many times flooding connections were held back.
    package var heldBackCount: Int { counters.withLockedValue { $0.heldBack } }

    /// Returns once `count` text messages arrived, over all connections. Wrap it in a timeout.
    package func waitForTexts(_ count: Int) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ready = counters.withLockedValue { counters -> Bool in
                    if counters.messages.count >= count || Task.isCancelled { return true }
                    counters.textWaiters.append((count, continuation))
                    return false
                }
                if ready { continuation.resume() }
            }
        } onCancel: {
            wakeAll()
        }
    }

    /// Starts reading on every connection that holds its reads.
    package func releaseReads() {
        for child in children.withLockedValue({ Array($0.values) }) {
            child.setOption(ChannelOptions.autoRead, value: true).whenSuccess { child.read() }
        }
    }

    fileprivate func floodHeldBack() {
        let waiters = counters.withLockedValue { counters in
            counters.heldBack += 1
            defer { counters.heldBackWaiters = [] }
            return counters.heldBackWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    package var connectionCount: Int { counters.withLockedValue { $0.connections } }
    package var pingCount: Int { counters.withLockedValue { $0.pings } }

    /// How many pings arrived on connection `number` (from 1).
    package func pingCount(onConnection number: Int) -> Int { counters.withLockedValue { $0.pingsByConnection[number] ?? 0 } }

    /// Returns once `count` pings have arrived on connection `number`. Wrap it in a timeout.
    package func waitForPings(_ count: Int, onConnection number: Int) async {
        await withCheckedContinuation { continuation in
            let ready = counters.withLockedValue { counters -> Bool in
                if (counters.pingsByConnection[number] ?? 0) >= count { return true }
                counters.pingWaiters.append((number, count, continuation))
                return false
            }
            if ready { continuation.resume() }
        }
    }
    package var receivedTexts: [String] { counters.withLockedValue { $0.messages } }

    private init(channel: any Channel) {
        self.channel = channel
        self.port = channel.localAddress?.port ?? 0
    }

    /// Starts a peer; `behaviour` gets the connection's number, from 1. With `tls`, it speaks
    /// wss with that context.
    package static func start(
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
                // Known from the accept on, so dropAll() reaches a connection whose upgrade is
                // still being answered.
                peer.opened(child)
                child.closeFuture.whenComplete { _ in peer.closed(child) }
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
    package func dropAll() {
        for child in children.withLockedValue({ Array($0.values) }) { child.close(promise: nil) }
    }

    /// Stops listening and drops every connection.
    package func stop() async {
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
            if let text {
                counters.messages.append(text)
                let reached = counters.messages.count
                let done = counters.textWaiters.filter { $0.count <= reached }
                counters.textWaiters.removeAll { $0.count <= reached }
                if !done.isEmpty { return done.map(\.continuation) }
            }
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
    private var texts = 0
    private var flooded = 0

    init(peer: ScriptedPeer, script: ScriptedPeer.Behaviour, number: Int) {
        self.peer = peer
        self.script = script
        self.number = number
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if script.flood != nil {
            // A small send buffer, so that a few MiB are enough to fill it and the client's.
            context.channel.setOption(ChannelOptions.socketOption(.so_sndbuf), value: 16 * 1024).whenComplete { _ in }
            context.channel.setOption(ChannelOptions.socketOption(.so_rcvbuf), value: 16 * 1024).whenComplete { _ in }
        }
        // A peer that holds its reads keeps the kernel's receive buffer it was accepted with.
        // Shrinking it now, below the loopback MSS (64 KiB) and after the window was offered,
        // paced the transfer to one window per zero-window probe (200 ms, backing off to
        // seconds) once reads resumed: a test of the client then waited on the kernel.
        if script.holdReads {
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
        }
        // In one write, so that the client reads them together.
        for frame in script.framesOnConnect {
            context.write(wrapOutboundOut(frame), promise: nil)
        }
        if !script.framesOnConnect.isEmpty { context.flush() }
        if script.flood != nil {
            flood(context: context)
        } else if script.dropOnConnect {
            context.close(promise: nil)
        } else if let (code, reason) = script.closeOnConnect {
            var payload = context.channel.allocator.buffer(capacity: 2 + reason.utf8.count)
            payload.writeInteger(code)
            payload.writeString(reason)
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: payload)), promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        context.fireChannelInactive()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable, script.flood != nil { flood(context: context) }
        context.fireChannelWritabilityChanged()
    }

    /// Writes flood messages while the channel is writable.
    private func flood(context: ChannelHandlerContext) {
        guard let (count, bytes) = script.flood, context.channel.isActive else { return }
        let before = flooded
        while flooded < count, context.channel.isWritable {
            let head = "\(flooded):"
            let text = head + String(repeating: "x", count: max(bytes - head.utf8.count, 0))
            context.write(
                wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: context.channel.allocator.buffer(string: text))), promise: nil)
            flooded += 1
        }
        peer.countFlooded(flooded - before)
        context.flush()
        if flooded < count { peer.floodHeldBack() }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // Dropped after dropAfterTexts: frames already decoded from that read are not counted,
        // or they would land in receivedTexts after the next connection's.
        if let limit = script.dropAfterTexts, texts >= limit { return }
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
            texts += 1
            if let limit = script.dropAfterTexts, texts >= limit {
                context.close(promise: nil)
                return
            }
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
