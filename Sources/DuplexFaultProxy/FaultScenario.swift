public import Foundation

/// A timeline of faults, applied to a ``FaultProxy`` (and, through `chaos` steps, to the
/// `duplex-server` behind it) at set times, so that a fault run can be written down, reviewed and
/// run again: by `duplex proxy --scenario FILE`, or `withScenario` in `DuplexTesting`.
///
/// A scenario file is JSON (the format is in `docs/scenarios.md`):
///
/// ```json
/// {
///   "seed": 42,
///   "steps": [
///     {"at": 2, "add": {"type": "latency", "ms": 300, "direction": "downstream"}, "for": 5},
///     {"at": 10, "add": {"type": "blackhole"}, "for": 3},
///     {"at": 15, "chaos": "restart?ms=1000&amnesia=1"},
///     {"at": 20, "heal": true}
///   ]
/// }
/// ```
///
/// Times are seconds from the start. Each step does one thing: `add` a toxic (the fields of
/// ``FaultProxy/Toxic/init(fields:)``, and `direction`), for `for` seconds if given, under a
/// `name` that a later `remove` step can use; `remove` one by name; `heal` (remove every toxic);
/// `drop` every proxied connection; or `chaos`, a `POST /_chaos/…` to the server. Steps at the
/// same time run in the file's order, after the toxics whose time is up at that moment are
/// removed. `seed` is the proxy's seed (``FaultProxy/seed``), when the proxy is started for the
/// scenario.
///
/// Each step logs a line when it takes effect, in the scenario's time, so two runs with the same
/// scenario and seed log the same lines.
public struct FaultScenario: Sendable, Equatable {
    /// One step: what to do, and when.
    public struct Step: Sendable, Equatable {
        /// When, from the start of the scenario.
        public var at: Duration
        public var action: Action

        public init(at: Duration, _ action: Action) {
            self.at = at
            self.action = action
        }
    }

    /// What a step does.
    public enum Action: Sendable, Equatable {
        /// Adds a toxic; removes it `duration` later when one is given. `name` lets a later
        /// ``remove(name:)`` step remove it.
        case add(FaultProxy.Toxic, direction: FaultProxy.Direction, name: String? = nil, duration: Duration? = nil)
        /// Removes the toxic an earlier step added under `name`.
        case remove(name: String)
        /// Removes every toxic: the path heals.
        case heal
        /// Closes every proxied connection.
        case drop
        /// `POST /_chaos/PATH` to the server (`PATH` with its query, as `restart?ms=1000`).
        case chaos(String)
    }

    /// A scenario that cannot be run, and why: which step, which field.
    public struct Invalid: Error, CustomStringConvertible, Sendable {
        public var message: String
        public var description: String { message }
    }

    /// A step that failed while the scenario ran (a chaos endpoint that refused).
    public struct StepFailed: Error, CustomStringConvertible, Sendable {
        /// The step's number, from 1, in the file's order.
        public var step: Int
        public var reason: String
        public var description: String { "step \(step) failed: \(reason)" }
    }

    /// The proxy's seed for this scenario; nil leaves it to the proxy.
    public var seed: UInt64?
    public var steps: [Step]

    /// A scenario of `steps` (in any order: they run by time, in this order at equal times).
    /// - Throws: ``Invalid`` for a negative time or duration, or a `remove` of a name that no
    ///   earlier step adds.
    public init(seed: UInt64? = nil, steps: [Step]) throws {
        self.seed = seed
        self.steps = steps
        try validate()
    }

    private func validate() throws {
        var names: [String: Duration] = [:]
        for (index, step) in steps.enumerated() {
            let number = index + 1
            guard step.at >= .zero, step.at <= Self.maximumDuration else {
                throw Invalid(message: "step \(number): at must be from 0 to a year")
            }
            switch step.action {
            case .add(_, _, let name, let duration):
                if let duration, duration <= .zero || duration > Self.maximumDuration {
                    throw Invalid(message: "step \(number): for must be more than 0 seconds and at most a year")
                }
                if let name {
                    guard names[name] == nil else {
                        throw Invalid(message: "step \(number): the name \"\(name)\" is already used by an earlier step")
                    }
                    names[name] = step.at
                }
            case .remove(let name):
                guard let added = names[name], added <= step.at else {
                    throw Invalid(message: "step \(number): remove \"\(name)\", but no step before it adds a toxic of that name")
                }
            case .chaos(let path):
                guard !path.isEmpty else { throw Invalid(message: "step \(number): chaos needs a path, as \"drop?route=echo\"") }
            case .heal, .drop:
                break
            }
        }
    }

    // MARK: Reading a file

    /// Reads a scenario from its JSON.
    /// - Throws: ``Invalid``, naming the step and field that are wrong.
    public init(json: Data) throws {
        let object: Any
        do {
            object = try JSONSerialization.jsonObject(with: json)
        } catch {
            throw Invalid(message: "not JSON: \(error.localizedDescription)")
        }
        guard let file = object as? [String: Any] else { throw Invalid(message: "a scenario is a JSON object with steps, and optionally a seed") }
        if let unknown = Set(file.keys).subtracting(["seed", "steps"]).sorted().first {
            throw Invalid(message: "unknown field \"\(unknown)\": a scenario has steps, and optionally a seed")
        }
        var seed: UInt64?
        if let value = file["seed"] {
            guard let number = value as? NSNumber, let parsed = UInt64(exactly: number.doubleValue), !Self.isBool(number) else {
                throw Invalid(message: "seed must be a whole number from 0 to 2^53 (larger seeds: give --seed)")
            }
            seed = parsed
        }
        guard let steps = file["steps"] as? [Any], !steps.isEmpty else { throw Invalid(message: "steps must be a list of at least one step") }
        try self.init(seed: seed, steps: steps.enumerated().map { try Self.step($1, number: $0 + 1) })
    }

    /// Reads a scenario file.
    /// - Throws: ``Invalid``, with the file's path.
    public init(contentsOf path: String) throws {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw Invalid(message: "cannot read \(path): \(error.localizedDescription)")
        }
        do {
            try self.init(json: data)
        } catch let error as Invalid {
            throw Invalid(message: "\(path): \(error.message)")
        }
    }

    private static let actions = ["add", "remove", "heal", "drop", "chaos"]

    /// The latest time and longest `for` a file may give: a year, in seconds.
    private static let maximumSeconds = 31_536_000.0

    private static func step(_ value: Any, number: Int) throws -> Step {
        func invalid(_ message: String) -> Invalid { Invalid(message: "step \(number): \(message)") }
        guard let fields = value as? [String: Any] else { throw invalid("a step is an object, as {\"at\": 2, \"heal\": true}") }
        if let unknown = Set(fields.keys).subtracting(["at", "for", "name"] + actions).sorted().first {
            throw invalid("unknown field \"\(unknown)\"; a step has at, and one of add (with for and name), remove, heal, drop or chaos")
        }
        guard let atNumber = fields["at"] as? NSNumber, !isBool(atNumber), (0...maximumSeconds).contains(atNumber.doubleValue) else {
            throw invalid("at must be a number of seconds from 0 to \(Int(maximumSeconds)) (a year)")
        }
        let at = seconds(atNumber.doubleValue)
        let given = actions.filter { fields[$0] != nil }
        guard given.count == 1, let action = given.first else {
            throw invalid("a step does one thing: add, remove, heal, drop or chaos (found \(given.isEmpty ? "none" : given.joined(separator: ", ")))")
        }
        if action != "add", let extra = ["for", "name"].first(where: { fields[$0] != nil }) {
            throw invalid("\(extra) goes with add only")
        }
        switch action {
        case "add":
            guard let add = fields["add"] as? [String: Any] else { throw invalid("add is an object, as {\"type\": \"latency\", \"ms\": 300}") }
            var text: [String: String] = [:]
            for (key, value) in add {
                switch value {
                case let string as String: text[key] = string
                case let number as NSNumber where !isBool(number):
                    let double = number.doubleValue
                    text[key] = double.rounded() == double && abs(double) < 1e15 ? String(Int64(double)) : String(double)
                default: throw invalid("add's \(key) must be a string or a number")
                }
            }
            let direction = try text.removeValue(forKey: "direction").map { name in
                guard let direction = FaultProxy.Direction(name: name) else {
                    throw invalid("direction must be both, upstream or downstream, not \"\(name)\"")
                }
                return direction
            }
            let toxic: FaultProxy.Toxic
            do {
                toxic = try FaultProxy.Toxic(fields: text)
            } catch let error as FaultProxy.InvalidToxic {
                throw invalid(error.message)
            }
            var duration: Duration?
            if let value = fields["for"] {
                guard let number = value as? NSNumber, !isBool(number), number.doubleValue > 0, number.doubleValue <= maximumSeconds else {
                    throw invalid("for must be a number of seconds, more than 0 and at most \(Int(maximumSeconds)) (a year)")
                }
                duration = seconds(number.doubleValue)
            }
            var name: String?
            if let value = fields["name"] {
                guard let text = value as? String, !text.isEmpty else { throw invalid("name must be a string") }
                name = text
            }
            return Step(at: at, .add(toxic, direction: direction ?? .both, name: name, duration: duration))
        case "remove":
            guard let name = fields["remove"] as? String, !name.isEmpty else {
                throw invalid("remove takes the name of a toxic an earlier step added")
            }
            return Step(at: at, .remove(name: name))
        case "heal", "drop":
            guard let flag = fields[action] as? NSNumber, isBool(flag), flag.boolValue else { throw invalid("\(action) takes true") }
            return Step(at: at, action == "heal" ? .heal : .drop)
        default:
            guard var path = fields["chaos"] as? String else { throw invalid("chaos takes the fault's path, as \"restart?ms=1000\"") }
            for prefix in ["/_chaos/", "_chaos/", "/"] where path.hasPrefix(prefix) {
                path.removeFirst(prefix.count)
                break
            }
            guard !path.isEmpty else { throw invalid("chaos takes the fault's path, as \"restart?ms=1000\"") }
            return Step(at: at, .chaos(path))
        }
    }

    private static let maximumDuration = Duration.seconds(31_536_000)

    private static func seconds(_ value: Double) -> Duration {
        .nanoseconds(Int64((value * 1e9).rounded()))
    }

    /// Whether a number JSONSerialization read was `true` or `false`.
    private static func isBool(_ number: NSNumber) -> Bool {
        String(cString: number.objCType) == "c"
    }

    // MARK: Running

    /// Runs the scenario against `proxy`: waits for each step's time on `clock` and applies it,
    /// logging a line through `log` as it takes effect. `chaos` carries out `chaos` steps (by
    /// default a `POST /_chaos/…` to the proxy's upstream, ``ChaosRequest``). Returns after the
    /// last step; cancelling it stops it where it is (the toxics it added stay).
    /// - Throws: ``StepFailed`` when a chaos step fails; `CancellationError`.
    public func run(
        on proxy: FaultProxy,
        clock: some Clock<Duration> = ContinuousClock(),
        chaos: (@Sendable (String) async throws -> Void)? = nil,
        log: @Sendable (String) -> Void
    ) async throws {
        let chaos =
            chaos ?? { [host = proxy.upstreamHost, port = proxy.upstreamPort] path in try await ChaosRequest.post(host: host, port: port, path) }
        // Each step, and each toxic's end, in time order: ends first at equal times, then steps in file order.
        var timeline: [(at: Duration, rank: Int, order: Int, event: TimelineEvent)] = []
        for (index, step) in steps.enumerated() {
            timeline.append((step.at, 1, index, .step(index)))
            if case .add(_, _, _, let duration?) = step.action {
                timeline.append((step.at + duration, 0, index, .expire(index)))
            }
        }
        timeline.sort { ($0.at, $0.rank, $0.order) < ($1.at, $1.rank, $1.order) }
        let end = timeline.last?.at ?? .zero
        log("scenario: \(steps.count) step\(steps.count == 1 ? "" : "s") over \(Self.format(end)), proxy seed \(proxy.seed)")
        var added: [Int: FaultProxy.ToxicID] = [:]
        var named: [String: Int] = [:]
        let start = clock.now
        for entry in timeline {
            try await clock.sleep(until: start.advanced(by: entry.at), tolerance: nil)
            let time = "scenario \(Self.format(entry.at))"
            switch entry.event {
            case .expire(let index):
                guard let id = added.removeValue(forKey: index), case .add(let toxic, let direction, _, let duration?) = steps[index].action else {
                    continue
                }
                proxy.remove(id)
                log("\(time): step \(index + 1)'s \(toxic) (\(direction.name)) removed, its \(Self.format(duration)) up")
            case .step(let index):
                let number = index + 1
                switch steps[index].action {
                case .add(let toxic, let direction, let name, let duration):
                    added[index] = proxy.add(toxic, direction: direction)
                    if let name { named[name] = index }
                    let label = name.map { " as \"\($0)\"" } ?? ""
                    log("\(time): step \(number): add \(toxic) (\(direction.name))\(label)\(duration.map { ", for \(Self.format($0))" } ?? "")")
                case .remove(let name):
                    if let adder = named[name], let id = added.removeValue(forKey: adder) {
                        proxy.remove(id)
                        log("\(time): step \(number): remove \"\(name)\"")
                    } else {
                        log("\(time): step \(number): remove \"\(name)\": already gone")
                    }
                case .heal:
                    proxy.removeAll()
                    added.removeAll()
                    log("\(time): step \(number): heal (every toxic removed)")
                case .drop:
                    proxy.dropAll()
                    log("\(time): step \(number): drop every connection")
                case .chaos(let path):
                    do {
                        try await chaos(path)
                    } catch {
                        throw StepFailed(step: number, reason: "chaos \(path): \(error)")
                    }
                    log("\(time): step \(number): chaos \(path)")
                }
            }
        }
        log("scenario: done after \(Self.format(end))")
    }

    private enum TimelineEvent {
        case step(Int)
        case expire(Int)
    }

    /// `2.5 s`, `300 ms`.
    static func format(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let milliseconds = seconds * 1_000 + attoseconds / 1_000_000_000_000_000
        if milliseconds % 1_000 == 0 { return "\(milliseconds / 1_000) s" }
        if milliseconds < 1_000 { return "\(milliseconds) ms" }
        return "\(Double(milliseconds) / 1_000) s"
    }
}
