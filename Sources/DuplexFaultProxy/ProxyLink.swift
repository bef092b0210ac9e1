import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
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
func clampedNanoseconds(_ duration: Duration) -> Int64 {
    let (seconds, attoseconds) = duration.components
    guard seconds < 9_000_000_000 else { return 9_000_000_000 * 1_000_000_000 }
    return max(seconds, 0) * 1_000_000_000 + attoseconds / 1_000_000_000
}

/// The C `struct linger`, for SO_LINGER.
struct Linger {
    var onoff: Int32
    var seconds: Int32
}
