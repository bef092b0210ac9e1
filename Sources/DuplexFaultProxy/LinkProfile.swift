extension FaultProxy {
    /// A network link's figures each way, as the Network Link Conditioner's presets give them:
    /// bandwidth, delay, jitter and packet loss. Added as one toxic
    /// (``Toxic/profile(_:)``), it shapes the uplink (client to upstream) and the downlink with
    /// their own figures.
    ///
    /// ```swift
    /// let proxy = try await FaultProxy.start(upstreamPort: server.port)
    /// let threeG = proxy.add(.profile(.threeG), direction: .both)
    /// ```
    ///
    /// **Loss as TCP sees it.** The proxy carries a TCP stream, so a lost packet is not lost data:
    /// the sender retransmits it, and the stream behind it stalls until the retransmission
    /// arrives. The proxy models each 1,460-byte segment as lost with the profile's probability;
    /// a lost segment holds everything after it for a retransmission timeout (the round trip,
    /// at least Linux's 200 ms floor, doubling for each retransmission that is lost too). Bytes
    /// are never dropped, reordered or corrupted. A loss of 1 (`100-loss`) delivers nothing
    /// while the profile is in place and keeps the connections open; what was sent meanwhile
    /// arrives, in order, once it is removed, as TCP's retransmissions deliver it when the link
    /// comes back.
    public struct LinkProfile: Sendable, Hashable, CustomStringConvertible {
        /// One direction's figures.
        public struct Link: Sendable, Hashable {
            /// The most bytes a second it carries; nil: no limit.
            public var bytesPerSecond: Int?
            /// The delay each chunk takes.
            public var delay: Duration
            /// Up to this much more or less delay per chunk.
            public var jitter: Duration
            /// The probability, from 0 to 1, that a packet is lost.
            public var loss: Double

            /// A link carrying `kilobitsPerSecond` (nil: no limit), with the delay, jitter and loss given.
            public init(kilobitsPerSecond: Int?, delay: Duration, jitter: Duration = .zero, loss: Double = 0) {
                // At least 1 byte a second, and no overflow for an absurd figure given in code.
                self.bytesPerSecond = kilobitsPerSecond.map { kilobits in
                    let (bytes, overflow) = max(kilobits, 0).multipliedReportingOverflow(by: 125)
                    return overflow ? Int.max : max(bytes, 1)
                }
                self.delay = max(delay, .zero)
                self.jitter = max(jitter, .zero)
                self.loss = loss.isNaN ? 0 : min(max(loss, 0), 1)
            }
        }

        /// The name ``init(name:)`` reads: `3g`, `lte`, `very-bad-network`.
        public var name: String
        /// Upstream to client.
        public var downlink: Link
        /// Client to upstream.
        public var uplink: Link

        /// A profile of your own.
        public init(name: String, downlink: Link, uplink: Link) {
            self.name = name
            self.downlink = downlink
            self.uplink = uplink
        }

        /// The named profile: one of ``all``'s names.
        public init?(name: String) {
            guard let profile = Self.all.first(where: { $0.name == name }) else { return nil }
            self = profile
        }

        /// `3g`: 780 kbit/s down, 330 up, 100 ms each way.
        public static let threeG = LinkProfile(
            name: "3g",
            downlink: Link(kilobitsPerSecond: 780, delay: .milliseconds(100)),
            uplink: Link(kilobitsPerSecond: 330, delay: .milliseconds(100))
        )
        /// `edge`: 240 kbit/s down with 400 ms, 200 up with 440 ms.
        public static let edge = LinkProfile(
            name: "edge",
            downlink: Link(kilobitsPerSecond: 240, delay: .milliseconds(400)),
            uplink: Link(kilobitsPerSecond: 200, delay: .milliseconds(440))
        )
        /// `lte`: 50 Mbit/s down with 50 ms, 10 up with 65 ms.
        public static let lte = LinkProfile(
            name: "lte",
            downlink: Link(kilobitsPerSecond: 50_000, delay: .milliseconds(50)),
            uplink: Link(kilobitsPerSecond: 10_000, delay: .milliseconds(65))
        )
        /// `dsl`: 2 Mbit/s down, 256 kbit/s up, 5 ms each way.
        public static let dsl = LinkProfile(
            name: "dsl",
            downlink: Link(kilobitsPerSecond: 2_000, delay: .milliseconds(5)),
            uplink: Link(kilobitsPerSecond: 256, delay: .milliseconds(5))
        )
        /// `wifi`: 40 Mbit/s down, 33 up, 1 ms each way.
        public static let wifi = LinkProfile(
            name: "wifi",
            downlink: Link(kilobitsPerSecond: 40_000, delay: .milliseconds(1)),
            uplink: Link(kilobitsPerSecond: 33_000, delay: .milliseconds(1))
        )
        /// `lossy-wifi`: ``wifi`` with 5 ms ± 4 ms of delay and 2 % loss each way, a busy
        /// access point at the edge of its range. Not a Network Link Conditioner preset: ours.
        public static let lossyWiFi = LinkProfile(
            name: "lossy-wifi",
            downlink: Link(kilobitsPerSecond: 40_000, delay: .milliseconds(5), jitter: .milliseconds(4), loss: 0.02),
            uplink: Link(kilobitsPerSecond: 33_000, delay: .milliseconds(5), jitter: .milliseconds(4), loss: 0.02)
        )
        /// `very-bad-network`: 1 Mbit/s, 500 ms and 10 % loss each way.
        public static let veryBadNetwork = LinkProfile(
            name: "very-bad-network",
            downlink: Link(kilobitsPerSecond: 1_000, delay: .milliseconds(500), loss: 0.1),
            uplink: Link(kilobitsPerSecond: 1_000, delay: .milliseconds(500), loss: 0.1)
        )
        /// `100-loss`: every packet lost, both ways. Nothing arrives and nothing closes while it
        /// is in place; once removed, what was sent arrives in order.
        public static let fullLoss = LinkProfile(
            name: "100-loss",
            downlink: Link(kilobitsPerSecond: nil, delay: .zero, loss: 1),
            uplink: Link(kilobitsPerSecond: nil, delay: .zero, loss: 1)
        )

        /// Every named profile, in the order `duplex proxy --help` lists them.
        public static let all: [LinkProfile] = [.threeG, .edge, .lte, .dsl, .wifi, .lossyWiFi, .veryBadNetwork, .fullLoss]

        /// The figures of `direction`'s link (``Direction/upstream`` is the uplink).
        func link(_ direction: Direction) -> Link { direction == .upstream ? uplink : downlink }

        /// How long a lost segment stalls its stream before its first retransmission arrives:
        /// the round trip, at least 200 ms (Linux's `TCP_RTO_MIN`).
        var retransmissionTimeout: Duration {
            max(uplink.delay + downlink.delay + uplink.jitter + downlink.jitter, .milliseconds(200))
        }

        /// `3g (down 780 kbit/s 100 ms, up 330 kbit/s 100 ms)`.
        public var description: String {
            func text(_ link: Link) -> String {
                var parts = [link.bytesPerSecond.map { "\($0 / 125) kbit/s" } ?? "unlimited"]
                parts.append("\(link.delay.components.seconds * 1_000 + link.delay.components.attoseconds / 1_000_000_000_000_000) ms")
                if link.jitter > .zero {
                    parts[parts.count - 1] +=
                        " ± \(link.jitter.components.seconds * 1_000 + link.jitter.components.attoseconds / 1_000_000_000_000_000) ms"
                }
                if link.loss > 0 { parts.append("\(Self.percent(link.loss)) loss") }
                return parts.joined(separator: " ")
            }
            return "\(name) (down \(text(downlink)), up \(text(uplink)))"
        }

        private static func percent(_ value: Double) -> String {
            let percent = value * 100
            return percent == percent.rounded() ? "\(Int(percent)) %" : "\(percent) %"
        }
    }
}

extension FaultProxy.Toxic {
    /// Shapes the connections as the link `profile` does: its uplink's figures for data going
    /// upstream, its downlink's for data coming back. Add it with direction `.both` for the
    /// whole link, or one direction for that side only.
    public static func profile(_ profile: FaultProxy.LinkProfile) -> FaultProxy.Toxic {
        FaultProxy.Toxic(kind: .profile(profile))
    }
}
