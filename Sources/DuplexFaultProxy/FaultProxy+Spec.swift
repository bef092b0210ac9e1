extension FaultProxy.Direction {
    /// The direction `name` names: `both`, `upstream` (or `up`), `downstream` (or `down`).
    public init?(name: String) {
        switch name {
        case "both": self = .both
        case "upstream", "up": self = .upstream
        case "downstream", "down": self = .downstream
        default: return nil
        }
    }

    /// The name ``init(name:)`` reads.
    public var name: String {
        switch self {
        case .both: "both"
        case .upstream: "upstream"
        case .downstream: "downstream"
        }
    }
}

extension FaultProxy.Toxic: CustomStringConvertible {
    /// A toxic described by name and parameters, as `duplex proxy`'s control endpoint and
    /// scenario files give them: `type=latency&ms=M[&jitter=M]`, `type=bandwidth&rate=BYTES_PER_S`,
    /// `type=blackhole`, `type=reset-peer`, `type=close-after&bytes=N`,
    /// `type=slicer&size=N[&variation=N][&delay=MS]`, `type=path-switch`, `type=suspend&ms=M`,
    /// `type=profile&name=NAME` (a ``FaultProxy/LinkProfile``: `3g`, `edge`, `lte`, `dsl`,
    /// `wifi`, `lossy-wifi`, `very-bad-network`, `100-loss`),
    /// each with `[&toxicity=P]` and `[&connections=all|open|new|N]` (a path switch's default is
    /// `open`, the others' `all`). Other fields (`direction`, a name) are left to the caller.
    /// Times are at most a day (86,400,000 ms), sizes and rates at most 2^31 - 1.
    /// - Throws: ``FaultProxy/InvalidToxic``, saying which field is wrong and why.
    public init(fields: [String: String]) throws {
        func number(_ key: String, default value: Int? = nil, minimum: Int = 0) throws -> Int {
            guard let text = fields[key] else {
                if let value { return value }
                throw FaultProxy.InvalidToxic(message: "\(fields["type"] ?? "the toxic") needs \(key)=N")
            }
            let maximum = ["ms", "jitter", "delay"].contains(key) ? Self.maximumMilliseconds : Int(Int32.max)
            guard let parsed = Int(text), (minimum...maximum).contains(parsed) else {
                throw FaultProxy.InvalidToxic(message: "\(key) must be an integer from \(minimum) to \(maximum), not \"\(text)\"")
            }
            return parsed
        }
        var toxic: Self
        switch fields["type"] {
        case "latency":
            toxic = .latency(.milliseconds(try number("ms")), jitter: .milliseconds(try number("jitter", default: 0)))
        case "bandwidth":
            toxic = .bandwidth(bytesPerSecond: try number("rate", minimum: 1))
        case "blackhole":
            toxic = .blackhole
        case "reset-peer":
            toxic = .resetPeer
        case "close-after":
            toxic = .closeAfter(bytes: try number("bytes"))
        case "slicer":
            toxic = .slicer(
                averageSize: try number("size", minimum: 1),
                sizeVariation: try number("variation", default: 0),
                delay: .milliseconds(try number("delay", default: 0))
            )
        case "path-switch":
            toxic = .pathSwitch
        case "suspend":
            toxic = .suspend(.milliseconds(try number("ms")))
        case "profile":
            let names = FaultProxy.LinkProfile.all.map(\.name).joined(separator: ", ")
            guard let name = fields["name"] else { throw FaultProxy.InvalidToxic(message: "profile needs name=\(names)") }
            guard let profile = FaultProxy.LinkProfile(name: name) else {
                throw FaultProxy.InvalidToxic(message: "name must be one of \(names), not \"\(name)\"")
            }
            toxic = .profile(profile)
        case let other:
            throw FaultProxy.InvalidToxic(
                message:
                    "type must be latency, bandwidth, blackhole, reset-peer, close-after, slicer, path-switch, suspend or profile, not \(other.map { "\"\($0)\"" } ?? "missing")"
            )
        }
        if let text = fields["connections"] {
            guard let connections = FaultProxy.Connections(name: text) else {
                throw FaultProxy.InvalidToxic(message: "connections must be all, open, new or a connection's number from 1, not \"\(text)\"")
            }
            toxic = toxic.connections(connections)
        }
        if let text = fields["toxicity"] {
            guard let toxicity = Double(text), (0...1).contains(toxicity) else {
                throw FaultProxy.InvalidToxic(message: "toxicity must be a number from 0 to 1, not \"\(text)\"")
            }
            toxic = toxic.toxicity(toxicity)
        }
        self = toxic
    }

    /// The toxic in words, as scenario logs show it: `latency 300 ms ± 50 ms`,
    /// `blackhole (toxicity 0.5)`.
    public var description: String {
        let text: String
        switch kind {
        case .latency(let delay, let jitter):
            text = "latency \(Self.milliseconds(delay)) ms" + (jitter > .zero ? " ± \(Self.milliseconds(jitter)) ms" : "")
        case .bandwidth(let rate):
            text = "bandwidth \(rate) bytes/s"
        case .blackhole:
            text = "blackhole"
        case .resetPeer:
            text = "reset-peer"
        case .closeAfter(let bytes):
            text = "close-after \(bytes) bytes"
        case .slicer(let size, let variation, let delay):
            text = "slicer \(size)" + (variation > 0 ? " ± \(variation)" : "") + " bytes, \(Self.milliseconds(delay)) ms apart"
        case .pathSwitch:
            text = "path-switch"
        case .suspend(let duration):
            text = "suspend \(Self.milliseconds(duration)) ms"
        case .profile(let profile):
            text = "profile \(profile)"
        }
        var notes: [String] = []
        if toxicity < 1 { notes.append("toxicity \(toxicity)") }
        let usual: FaultProxy.Connections = kind == .pathSwitch ? .openNow : .all
        if connections != usual {
            switch connections.kind {
            case .all: notes.append("every connection")
            case .openNow: notes.append("connections open when added")
            case .openedLater: notes.append("connections opened later")
            case .number(let number): notes.append("connection \(number)")
            }
        }
        return notes.isEmpty ? text : "\(text) (\(notes.joined(separator: ", ")))"
    }

    /// The longest time a toxic's fields take: a day.
    static let maximumMilliseconds = 86_400_000

    private static func milliseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        return seconds * 1_000 + attoseconds / 1_000_000_000_000_000
    }
}

extension FaultProxy {
    /// A toxic described wrongly (``Toxic/init(fields:)``).
    public struct InvalidToxic: Error, CustomStringConvertible, Sendable {
        /// What is wrong, for a person.
        public var message: String
        public var description: String { message }
    }
}
