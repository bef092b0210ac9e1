import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A TCP proxy that injects network faults, after toxiproxy's model: it listens on a loopback
/// port, forwards every connection to an upstream, and applies the toxics active at the moment
/// each chunk passes, per direction. Toxics can be added and removed while connections are open.
///
/// ```swift
/// let proxy = try await FaultProxy.start(upstreamPort: server.port)
/// let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(proxy.port)/echo")!)
/// let slow = proxy.add(.latency(.milliseconds(200), jitter: .milliseconds(20)), direction: .downstream)
/// proxy.add(.blackhole, direction: .both)      // the path goes silent; TCP stays open
/// proxy.removeAll()                            // the path heals
/// await proxy.stop()
/// ```
///
/// Bytes are never reordered: each chunk is released no earlier than the one before it. Data held
/// back by latency, bandwidth or slicing is buffered without limit, so keep such tests small.
///
/// **Reproducible.** Every random choice (jitter, slice sizes, whether a toxic with a
/// ``Toxic/toxicity(_:)`` below 1 applies to a connection) comes from a ``SeededGenerator``
/// derived from ``seed``: per connection (numbered in the order they are accepted) and per
/// direction, so that decisions on one connection do not depend on another's timing. The same
/// seed and the same traffic make the same decisions.
public final class FaultProxy: Sendable {
    /// Which way the data flows.
    public enum Direction: Sendable, Hashable {
        /// Client to upstream.
        case upstream
        /// Upstream to client.
        case downstream
        /// Both ways.
        case both

        func includes(_ other: Direction) -> Bool { self == .both || self == other }
    }

    /// A fault applied to the data in one direction.
    public struct Toxic: Sendable, Hashable {
        enum Kind: Sendable, Hashable {
            case latency(Duration, jitter: Duration)
            case bandwidth(bytesPerSecond: Int)
            case blackhole
            case resetPeer
            case closeAfter(bytes: Int)
            case slicer(averageSize: Int, sizeVariation: Int, delay: Duration)
            case pathSwitch
            case suspend(Duration)
            case profile(LinkProfile)
        }

        let kind: Kind
        /// The probability that the toxic applies to a connection, from 0 to 1.
        public private(set) var toxicity = 1.0
        /// Which connections the toxic applies to.
        public private(set) var connections: Connections

        init(kind: Kind, connections: Connections = .all) {
            self.kind = kind
            self.connections = connections
        }

        /// The same toxic, applying only to `connections`: the ones open when it is added, the
        /// ones opened after, or one connection by its number.
        public func connections(_ connections: Connections) -> Toxic {
            var toxic = self
            toxic.connections = connections
            return toxic
        }

        /// The same toxic, applying to each connection with probability `toxicity` (from 0 to 1;
        /// 1, the default, applies to all), as toxiproxy's `toxicity` does. Decided once per
        /// connection and toxic, from the proxy's ``FaultProxy/seed``.
        public func toxicity(_ toxicity: Double) -> Toxic {
            var toxic = self
            toxic.toxicity = toxicity.isNaN ? 1 : min(max(toxicity, 0), 1)
            return toxic
        }

        /// Delays each chunk by `delay`, ± up to `jitter`.
        public static func latency(_ delay: Duration, jitter: Duration = .zero) -> Toxic {
            Toxic(kind: .latency(delay, jitter: jitter))
        }

        /// Lets through at most this many bytes per second.
        public static func bandwidth(bytesPerSecond: Int) -> Toxic {
            Toxic(kind: .bandwidth(bytesPerSecond: max(bytesPerSecond, 1)))
        }

        /// Forwards nothing, and keeps the connections open: a dead path that TCP does not notice.
        public static let blackhole = Toxic(kind: .blackhole)

        /// Resets the connections (TCP RST) as soon as data passes, and new ones at once.
        public static let resetPeer = Toxic(kind: .resetPeer)

        /// Forwards `bytes` bytes, then closes the connection.
        public static func closeAfter(bytes: Int) -> Toxic {
            Toxic(kind: .closeAfter(bytes: max(bytes, 0)))
        }

        /// Splits data into pieces of about `averageSize` ± `sizeVariation` bytes, sent `delay` apart.
        public static func slicer(averageSize: Int, sizeVariation: Int = 0, delay: Duration = .zero) -> Toxic {
            Toxic(kind: .slicer(averageSize: max(averageSize, 1), sizeVariation: max(sizeVariation, 0), delay: delay))
        }

        /// The network path changed under the connections open now, as when a phone moves from
        /// Wi-Fi to cellular: they become half-open. Nothing they send arrives, either way, and
        /// no FIN or RST reaches either end (a close by one side is not passed on), while the
        /// sockets stay open. Connections opened after it pass normally. A connection that lost
        /// data to it stays dead once the toxic is removed, as a real one does; one that sent
        /// nothing meanwhile goes on. Add it with direction `.both`.
        public static let pathSwitch = Toxic(kind: .pathSwitch, connections: .openNow)

        /// Freezes the connections for `duration`, as a process that was suspended and resumed
        /// sees them (a laptop's sleep, an app in the background): what is sent meanwhile is
        /// held and delivered in order when it ends, and nothing is lost. One direction, or
        /// both. It removes itself once the time is up.
        public static func suspend(_ duration: Duration) -> Toxic {
            Toxic(kind: .suspend(max(duration, .zero)))
        }
    }

    /// Which connections a toxic applies to (``Toxic/connections(_:)``).
    public struct Connections: Sendable, Hashable, CustomStringConvertible {
        enum Kind: Sendable, Hashable {
            case all
            case openNow
            case openedLater
            case number(Int)
        }

        let kind: Kind

        /// Every connection, open now or later. The default.
        public static let all = Connections(kind: .all)
        /// The connections open when the toxic is added.
        public static let openNow = Connections(kind: .openNow)
        /// The connections opened after the toxic is added.
        public static let openedLater = Connections(kind: .openedLater)

        /// The connection with this number: the proxy numbers them from 1 in the order it
        /// accepts them (``FaultProxy/connections``), so `number(2)` is the second connection,
        /// open now or to come: after one reconnection, the connection after it.
        public static func number(_ number: Int) -> Connections { Connections(kind: .number(max(number, 1))) }

        /// How ``init(name:)`` reads it: `all`, `open`, `new` or a number.
        public var description: String {
            switch kind {
            case .all: "all"
            case .openNow: "open"
            case .openedLater: "new"
            case .number(let number): "\(number)"
            }
        }

        /// The connections `name` names: `all`, `open` (open now), `new` (opened later), or a
        /// connection's number from 1.
        public init?(name: String) {
            switch name {
            case "all": kind = .all
            case "open": kind = .openNow
            case "new": kind = .openedLater
            default:
                guard let number = Int(name), number >= 1 else { return nil }
                kind = .number(number)
            }
        }

        private init(kind: Kind) {
            self.kind = kind
        }
    }

    /// A proxied connection, as ``FaultProxy/connections`` lists it.
    public struct ConnectionInfo: Sendable, Hashable {
        /// Its number, from 1, in the order the proxy accepted it.
        public var number: Int
        /// How long it has been open.
        public var age: Duration
        /// The bytes the client sent, and the upstream, as read by the proxy (before toxics).
        public var bytesUpstream: Int
        public var bytesDownstream: Int
        /// Whether a path switch cut it: nothing it sends arrives any more.
        public var severed: Bool
    }

    /// Names an added toxic, to remove it.
    public struct ToxicID: Sendable, Hashable {
        let value: UInt64
    }

    /// An added toxic.
    struct Active {
        let id: ToxicID
        let toxic: Toxic
        let direction: Direction
        /// When it was added.
        let added: NIODeadline
        /// The numbers of the connections open when it was added, and the first number after.
        let openWhenAdded: Set<UInt64>
        let nextWhenAdded: UInt64

        /// Whether it applies to the connection with index `index` (from 0).
        func covers(_ index: UInt64) -> Bool {
            switch toxic.connections.kind {
            case .all: true
            case .openNow: openWhenAdded.contains(index)
            case .openedLater: index >= nextWhenAdded
            case .number(let number): index + 1 == UInt64(number)
            }
        }
    }

    private struct State {
        var nextID: UInt64 = 0
        var toxics: [Active] = []
        var links: [ObjectIdentifier: ProxyLink] = [:]
        var connections = 0
    }

    private let state = NIOLockedValueBox(State())
    private let listener: NIOLockedValueBox<(any Channel)?> = NIOLockedValueBox(nil)
    /// The host clients connect to.
    public let host: String
    /// The port clients connect to.
    public let port: Int
    /// The seed of every random choice: the one given to ``start(host:port:upstreamHost:upstreamPort:seed:)``,
    /// or one picked at random. Start another proxy with it to make the same choices again.
    public let seed: UInt64
    private let upstream: NIOLockedValueBox<(host: String, port: Int)>
    /// Where new connections are forwarded.
    public var upstreamHost: String { upstream.withLockedValue { $0.host } }
    /// Where new connections are forwarded.
    public var upstreamPort: Int { upstream.withLockedValue { $0.port } }

    private init(host: String, port: Int, upstreamHost: String, upstreamPort: Int, seed: UInt64) {
        self.host = host
        self.port = port
        self.seed = seed
        self.upstream = NIOLockedValueBox((upstreamHost, upstreamPort))
    }

    /// Forwards new connections to another upstream from now on, as a load balancer does when
    /// a server fails: connections open now stay where they are.
    public func setUpstream(host: String = "127.0.0.1", port: Int) {
        upstream.withLockedValue { $0 = (host, port) }
    }

    /// Starts a proxy on `host`:`port` (0 picks a free one) forwarding to the upstream, making
    /// its random choices from `seed` (nil: a random one; read it back from ``seed``).
    public static func start(
        host: String = "127.0.0.1",
        port: Int = 0,
        upstreamHost: String = "127.0.0.1",
        upstreamPort: Int,
        seed: UInt64? = nil
    ) async throws -> FaultProxy {
        let box = NIOLockedValueBox<FaultProxy?>(nil)
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.autoRead, value: false)
            .childChannelInitializer { child in
                guard let proxy = box.withLockedValue({ $0 }) else { return child.close() }
                return proxy.accept(child)
            }
            .bind(host: host, port: port)
            .get()
        let proxy = FaultProxy(
            host: host,
            port: channel.localAddress?.port ?? port,
            upstreamHost: upstreamHost,
            upstreamPort: upstreamPort,
            seed: seed ?? .random(in: .min ... .max)
        )
        proxy.listener.withLockedValue { $0 = channel }
        box.withLockedValue { $0 = proxy }
        return proxy
    }

    /// Adds a toxic; it applies to data that passes from now on, on the connections it covers
    /// (``Toxic/connections(_:)``: every connection unless it says otherwise).
    @discardableResult
    public func add(_ toxic: Toxic, direction: Direction) -> ToxicID {
        let (active, links) = state.withLockedValue { state in
            state.nextID += 1
            let active = Active(
                id: ToxicID(value: state.nextID),
                toxic: toxic,
                direction: direction,
                added: .now(),
                openWhenAdded: Set(state.links.values.map(\.index)),
                nextWhenAdded: UInt64(state.connections)
            )
            state.toxics.append(active)
            return (active, Array(state.links.values))
        }
        switch toxic.kind {
        case .resetPeer:
            for link in links where active.covers(link.index) && link.suffers(active.id, toxic) { link.reset() }
        case .suspend(let duration):
            // Over once its time is up: what it held is released then.
            listenerLoop.scheduleTask(in: .nanoseconds(clampedNanoseconds(duration))) { [weak self] in
                self?.remove(active.id)
            }
        default:
            break
        }
        return active.id
    }

    /// Whether the toxic is still in place: not removed, and (a suspension) not over.
    public func isActive(_ id: ToxicID) -> Bool {
        state.withLockedValue { state in state.toxics.contains { $0.id == id } }
    }

    /// Removes one toxic.
    public func remove(_ id: ToxicID) {
        let links = state.withLockedValue { state in
            state.toxics.removeAll { $0.id == id }
            return Array(state.links.values)
        }
        for link in links { link.releaseHeld() }
    }

    /// Removes every toxic: the path heals.
    public func removeAll() {
        let links = state.withLockedValue { state in
            state.toxics.removeAll()
            return Array(state.links.values)
        }
        for link in links { link.releaseHeld() }
    }

    /// How many connections the proxy has accepted.
    public var connectionCount: Int { state.withLockedValue { $0.connections } }

    /// The connections open now, by number.
    public var connections: [ConnectionInfo] {
        let links = state.withLockedValue { Array($0.links.values) }
        let now = NIODeadline.now()
        return links.map { $0.info(now: now) }.sorted { $0.number < $1.number }
    }

    /// Closes every proxied connection (both sides), with no toxic involved.
    public func dropAll() {
        for link in state.withLockedValue({ Array($0.links.values) }) { link.close() }
    }

    /// Stops listening and closes every connection.
    public func stop() async {
        dropAll()
        let channel = listener.withLockedValue { $0 }
        try? await channel?.close()
    }

    func toxics(for direction: Direction) -> [Active] {
        state.withLockedValue { state in state.toxics.filter { $0.direction.includes(direction) } }
    }

    /// The event loop the proxy's own timers run on.
    private var listenerLoop: any EventLoop { MultiThreadedEventLoopGroup.singleton.any() }

    private func accept(_ client: any Channel) -> EventLoopFuture<Void> {
        let (upstreamHost, upstreamPort) = upstream.withLockedValue { $0 }
        let connected = ClientBootstrap(group: client.eventLoop)
            .channelOption(ChannelOptions.autoRead, value: false)
            .connect(host: upstreamHost, port: upstreamPort)
        // Numbered in the order accepted, for its random choices.
        let index = state.withLockedValue { state in
            defer { state.connections += 1 }
            return UInt64(state.connections)
        }
        return connected.flatMap { upstream in
            let link = ProxyLink(proxy: self, index: index, client: client, upstream: upstream)
            let key = ObjectIdentifier(link)
            let toxics = self.state.withLockedValue { state in
                state.links[key] = link
                return state.toxics
            }
            let reset = toxics.contains { $0.toxic.kind == .resetPeer && $0.covers(index) && link.suffers($0.id, $0.toxic) }
            client.closeFuture.and(upstream.closeFuture).whenComplete { _ in
                self.state.withLockedValue { _ = $0.links.removeValue(forKey: key) }
            }
            return client.eventLoop.makeCompletedFuture {
                try client.pipeline.syncOperations.addHandler(ProxyHandler(link: link, direction: .upstream))
                try upstream.pipeline.syncOperations.addHandler(ProxyHandler(link: link, direction: .downstream))
                if reset { link.reset() }
            }
        }.flatMapErrorThrowing { error in
            client.close(promise: nil)
            throw error
        }
    }
}
