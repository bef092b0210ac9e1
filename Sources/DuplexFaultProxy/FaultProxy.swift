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

/// One proxied connection: the client side and the upstream side, on one event loop.
final class ProxyLink: Sendable {
    let proxy: FaultProxy
    /// The connection's number, in the order the proxy accepted them.
    let index: UInt64
    let client: any Channel
    let upstream: any Channel
    private let loop: NIOLoopBoundBox<Timing>
    /// When it was accepted.
    private let opened = NIODeadline.now()
    /// The bytes read from each side, and whether a path switch cut it: read by ``info(now:)``.
    private let counters = NIOLockedValueBox((upstream: 0, downstream: 0, severed: false))

    struct Timing {
        var nextRelease: [FaultProxy.Direction: NIODeadline] = [:]
        var forwarded: [FaultProxy.Direction: Int] = [:]
        /// Pieces scheduled and not yet written, per direction.
        var pending: [FaultProxy.Direction: Int] = [:]
        /// Each direction's random choices (jitter, slice sizes), in the order its data passes.
        var random: [FaultProxy.Direction: SeededGenerator]
        /// Data held by a link that loses every packet (`100-loss`), in order, until it goes.
        var held: [FaultProxy.Direction: [ByteBuffer]] = [:]
        /// The directions whose sender closed while data was held: the close follows the data.
        var closeHeld: Set<FaultProxy.Direction> = []
    }

    init(proxy: FaultProxy, index: UInt64, client: any Channel, upstream: any Channel) {
        self.proxy = proxy
        self.index = index
        self.client = client
        self.upstream = upstream
        let random: [FaultProxy.Direction: SeededGenerator] = [
            .upstream: SeededGenerator(seed: proxy.seed, stream: index, 0),
            .downstream: SeededGenerator(seed: proxy.seed, stream: index, 1),
        ]
        self.loop = NIOLoopBoundBox(Timing(random: random), eventLoop: client.eventLoop)
    }

    /// Whether the toxic `id` applies to this connection: always at a toxicity of 1, otherwise
    /// with that probability, decided from the seed, the connection's number and the toxic's, so
    /// the same whenever it is asked.
    func suffers(_ id: FaultProxy.ToxicID, _ toxic: FaultProxy.Toxic) -> Bool {
        guard toxic.toxicity < 1 else { return true }
        var decision = SeededGenerator(seed: proxy.seed, stream: index, 2, id.value)
        return decision.unit() < toxic.toxicity
    }

    /// The connection as ``FaultProxy/connections`` lists it.
    func info(now: NIODeadline) -> FaultProxy.ConnectionInfo {
        let counters = counters.withLockedValue { $0 }
        return FaultProxy.ConnectionInfo(
            number: Int(index) + 1,
            age: .nanoseconds((now - opened).nanoseconds),
            bytesUpstream: counters.upstream,
            bytesDownstream: counters.downstream,
            severed: counters.severed
        )
    }

    /// Whether a path switch cut this connection: for good, once it lost data to one.
    private var severed: Bool { counters.withLockedValue { $0.severed } }

    func target(of direction: FaultProxy.Direction) -> any Channel {
        direction == .upstream ? upstream : client
    }

    func close() {
        client.close(promise: nil)
        upstream.close(promise: nil)
    }

    /// Closes both sides with a TCP reset (SO_LINGER 0), where the socket allows it.
    func reset() {
        for channel in [client, upstream] {
            let provider = channel.syncOptions.flatMap { _ in channel as? any SocketOptionProvider }
            // `struct linger { int l_onoff; int l_linger; }`, laid out the same
            let lingered =
                provider?.unsafeSetSocketOption(level: .socket, name: .so_linger, value: Linger(onoff: 1, seconds: 0))
                ?? channel.eventLoop.makeSucceededVoidFuture()
            lingered.whenComplete { _ in channel.close(promise: nil) }
        }
    }

    /// Runs on the event loop: applies the toxics to `data` and forwards what is left.
    func forward(_ data: ByteBuffer, direction: FaultProxy.Direction) {
        let severed = counters.withLockedValue { counters in
            if direction == .upstream { counters.upstream += data.readableBytes } else { counters.downstream += data.readableBytes }
            return counters.severed
        }
        guard !severed else { return }
        pass(data, direction: direction)
    }

    /// Runs on the event loop: delivers what a link that lost every packet held, in order,
    /// through the toxics in place now, and the close that came after it.
    func releaseHeld() {
        client.eventLoop.execute {
            for direction in [FaultProxy.Direction.upstream, .downstream] {
                let held = self.loop.value.held.removeValue(forKey: direction) ?? []
                for data in held { self.pass(data, direction: direction) }
                if self.loop.value.held[direction, default: []].isEmpty, self.loop.value.closeHeld.remove(direction) != nil {
                    self.senderClosed(direction)
                }
            }
        }
    }

    /// Applies the toxics to `data`, read in `direction`, and forwards what is left.
    private func pass(_ data: ByteBuffer, direction: FaultProxy.Direction) {
        if loop.value.held[direction]?.isEmpty == false {
            // behind data already held: it waits its turn
            loop.value.held[direction]!.append(data)
            return
        }
        let active = proxy.toxics(for: direction).filter { covers($0) }
        let now = NIODeadline.now()
        var data = data
        var delay = Duration.zero
        var rate: Int?
        var slices: (average: Int, variation: Int, gap: Duration)?
        for (toxic, added) in active.map({ ($0.toxic, $0.added) }) {
            switch toxic.kind {
            case .pathSwitch:
                counters.withLockedValue { $0.severed = true }
                return
            case .suspend(let duration):
                // Held until the suspension ends, then released in order.
                let end = added + TimeAmount.nanoseconds(nanoseconds(duration))
                if end > now { delay = max(delay, .nanoseconds((end - now).nanoseconds)) }
            case .blackhole:
                return
            case .resetPeer:
                reset()
                return
            case .closeAfter(let limit):
                let sent = loop.value.forwarded[direction, default: 0]
                let allowed = max(limit - sent, 0)
                if data.readableBytes >= allowed {
                    let head = data.readSlice(length: allowed) ?? ByteBuffer()
                    schedule([head], direction: direction, delay: delay, rate: rate, gap: .zero)
                    let release = loop.value.nextRelease[direction] ?? .now()
                    client.eventLoop.scheduleTask(deadline: release) { self.close() }
                    return
                }
            case .latency(let base, let jitter):
                delay += max(base + self.jitter(jitter, direction: direction), .zero)
            case .profile(let profile):
                let link = profile.link(direction)
                guard link.loss < 1 else {
                    loop.value.held[direction, default: []].append(data)
                    return
                }
                delay += max(link.delay + jitter(link.jitter, direction: direction), .zero)
                if let bytesPerSecond = link.bytesPerSecond { rate = min(rate ?? .max, bytesPerSecond) }
                if link.loss > 0 {
                    delay += stall(bytes: data.readableBytes, loss: link.loss, timeout: profile.retransmissionTimeout, direction: direction)
                }
            case .bandwidth(let bytesPerSecond):
                rate = min(rate ?? .max, bytesPerSecond)
            case .slicer(let average, let variation, let gap):
                slices = (average, variation, gap)
            }
        }
        loop.value.forwarded[direction, default: 0] += data.readableBytes
        var pieces: [ByteBuffer] = []
        if let slices {
            while data.readableBytes > 0 {
                let size = max(1, average(slices.average, variation: slices.variation, direction: direction))
                pieces.append(data.readSlice(length: min(size, data.readableBytes))!)
            }
        } else {
            pieces = [data]
        }
        schedule(pieces, direction: direction, delay: delay, rate: rate, gap: slices?.gap ?? .zero)
    }

    /// A random extra delay from -`jitter` to +`jitter`.
    private func jitter(_ jitter: Duration, direction: FaultProxy.Direction) -> Duration {
        guard jitter > .zero else { return .zero }
        let range = min(Double(jitter.components.seconds) + Double(jitter.components.attoseconds) / 1e18, 86_400)
        return .nanoseconds(Int64(Double.random(in: -range...range, using: &loop.value.random[direction]!) * 1e9))
    }

    /// How long a chunk of `bytes` waits for retransmissions over a link that loses each packet
    /// with probability `loss`: nothing if none of its 1,460-byte segments is lost; otherwise
    /// a retransmission timeout, which doubles each time the retransmission is lost too (at
    /// most ten times), as TCP's backoff does. Lost segments in one chunk are resent together,
    /// as selective acknowledgements let TCP do.
    private func stall(bytes: Int, loss: Double, timeout: Duration, direction: FaultProxy.Direction) -> Duration {
        var noneLost = 1.0
        for _ in 0..<max(1, (bytes + 1_459) / 1_460) { noneLost *= 1 - loss }
        guard Double.random(in: 0..<1, using: &loop.value.random[direction]!) >= noneLost else { return .zero }
        var wait = timeout
        var total = timeout
        var retries = 0
        while retries < 10, Double.random(in: 0..<1, using: &loop.value.random[direction]!) < loss {
            wait = wait * 2
            total += wait
            retries += 1
        }
        return total
    }

    /// Whether the toxic applies to this connection: it covers it, and its toxicity picked it.
    private func covers(_ active: FaultProxy.Active) -> Bool {
        active.covers(index) && suffers(active.id, active.toxic)
    }

    /// The side sending in `direction` closed: close the other side once what is scheduled
    /// for it has gone out. Over a switched path the close does not arrive: the other side
    /// stays open, half-open, until it gives up by itself.
    func senderClosed(_ direction: FaultProxy.Direction) {
        let cut = severed || proxy.toxics(for: direction).contains { $0.toxic.kind == .pathSwitch && covers($0) }
        guard !cut else {
            counters.withLockedValue { $0.severed = true }
            return
        }
        guard loop.value.held[direction]?.isEmpty != false else {
            // the FIN is lost with the data before it, and arrives after it
            loop.value.closeHeld.insert(direction)
            return
        }
        let target = self.target(of: direction)
        let release = max(loop.value.nextRelease[direction] ?? .now(), .now())
        target.eventLoop.scheduleTask(deadline: release + .milliseconds(1)) { target.close(promise: nil) }
    }

    private func average(_ average: Int, variation: Int, direction: FaultProxy.Direction) -> Int {
        variation == 0 ? average : Int.random(in: (average - variation)...(average + variation), using: &loop.value.random[direction]!)
    }

    /// Writes the pieces at their release times, never out of order: a piece goes out at once
    /// only when nothing is waiting, and scheduled deadlines strictly increase, because the event
    /// loop runs tasks with equal deadlines in no guaranteed order.
    private func schedule(_ pieces: [ByteBuffer], direction: FaultProxy.Direction, delay: Duration, rate: Int?, gap: Duration) {
        let target = self.target(of: direction)
        let now = NIODeadline.now()
        let last = loop.value.nextRelease[direction] ?? now
        var release = max(now + TimeAmount.nanoseconds(nanoseconds(delay)), last)
        for (index, piece) in pieces.enumerated() {
            if index > 0 { release = release + .nanoseconds(nanoseconds(gap)) }
            if let rate {
                // a piece arrives once all its bytes have crossed the limited link
                release = release + .nanoseconds(Int64(piece.readableBytes) * 1_000_000_000 / Int64(rate))
            }
            let pending = loop.value.pending[direction, default: 0]
            if pending == 0, release <= now {
                target.writeAndFlush(piece, promise: nil)
            } else {
                if let previous = loop.value.nextRelease[direction], release <= previous {
                    release = previous + .nanoseconds(1)
                }
                loop.value.pending[direction, default: 0] += 1
                loop.value.nextRelease[direction] = release
                let box = loop
                target.eventLoop.scheduleTask(deadline: release) {
                    box.value.pending[direction, default: 1] -= 1
                    target.writeAndFlush(piece, promise: nil)
                }
            }
        }
        loop.value.nextRelease[direction] = max(release, loop.value.nextRelease[direction] ?? release)
    }

    private func nanoseconds(_ duration: Duration) -> Int64 {
        clampedNanoseconds(duration)
    }
}

/// `duration` in nanoseconds, at most about 290 years: a toxic given an absurd time in code
/// holds data that long rather than trapping.
private func clampedNanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    guard seconds < 9_000_000_000 else { return 9_000_000_000 * 1_000_000_000 }
    return max(seconds, 0) * 1_000_000_000 + attoseconds / 1_000_000_000
}

/// Reads one side of a link and forwards through the toxics to the other side.
final class ProxyHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    let link: ProxyLink
    let direction: FaultProxy.Direction

    init(link: ProxyLink, direction: FaultProxy.Direction) {
        self.link = link
        self.direction = direction
    }

    func handlerAdded(context: ChannelHandlerContext) {
        // reads are manual (autoRead off), and start once the channel is active
        if context.channel.isActive { context.read() }
    }

    func channelActive(context: ChannelHandlerContext) {
        context.read()
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        link.forward(unwrapInboundIn(data), direction: direction)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.read()
    }

    func channelInactive(context: ChannelHandlerContext) {
        link.senderClosed(direction)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        link.close()
    }
}

/// The C `struct linger`, for SO_LINGER.
private struct Linger {
    var onoff: Int32
    var seconds: Int32
}
