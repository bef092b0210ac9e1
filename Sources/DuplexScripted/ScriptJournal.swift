import DuplexHost
import DequeModule
import DuplexWire
public import Foundation
import NIOConcurrencyHelpers

/// What the server's scripted routes served: every connection with its request, every message
/// each way in order with its time, pings and pongs, refusals, and how each connection ended.
///
/// Wait on an entry rather than sleeping; the wait returns an entry already journaled too:
///
/// ```swift
/// let hello = try await server.journal.first(within: .seconds(5)) {
///     $0.direction == .in && $0.kind == .text
/// }
/// ```
///
/// The journal keeps its newest 100,000 entries and 64 MiB of message data; older entries are
/// let go and counted (``droppedCount``). `duplex-server` serves it at `GET /_journal` (a JSON
/// array of ``Entry``, oldest first) and empties it at `DELETE /_journal`, for loopback peers.
public final class ScriptJournal: Sendable {
    /// One thing that happened on a scripted route.
    public struct Entry: Sendable, Codable, Equatable, CustomStringConvertible {
        /// Which way it went: from the client (`in`) or from the server (`out`).
        public enum Direction: String, Sendable, Codable {
            case `in`
            case out
        }

        /// What happened.
        public enum Kind: String, Sendable, Codable {
            /// A connection or stream opened; ``request`` holds its request.
            case open
            /// A text message; ``data`` holds it.
            case text
            /// A binary message; ``data`` holds it in base64.
            case binary
            case ping
            case pong
            /// A close frame (``code``, ``reason``), or an SSE stream's end.
            case close
            /// TCP closed with no close handshake: by the server (`out`) or the client (`in`).
            case drop
            /// An SSE event (``id``, ``event``, ``data``).
            case event
            /// A request refused with ``code``; ``request`` holds it.
            case refused
            /// The client did not answer the server's close frame within the close timeout; TCP
            /// was closed.
            case timeout
            /// The route's handler threw (``data`` holds the error; the connection closed with
            /// 1011), or a protocol preset met input its protocol does not allow, or withheld an
            /// answer as its script says (``data`` says which).
            case error
            /// A protocol preset's packet, decoded (MQTT's, whose messages are binary): ``data``
            /// describes it, such as `PUBLISH ticks qos=1 id=1 "tick 1"`.
            case packet
            /// The route sent a frame the client must reject (``ScriptAction/fault(_:)``); ``data``
            /// names the ``FrameFault`` (`invalidUTF8`, …) and ``code`` is the close code the client
            /// should answer with.
            case fault
        }

        /// Which side of a proxied connection (a proxy route's): between the client and Duplex,
        /// or between Duplex and the upstream.
        public enum Leg: String, Sendable, Codable {
            case client
            case upstream
        }

        /// The connection's number, from 1, in the order they opened.
        public var connection: Int
        /// The route's path as requested.
        public var path: String
        public var direction: Direction
        public var kind: Kind
        /// A message's text (base64 for binary), an event's data, a ping's payload, an error.
        public var data: String?
        /// A close code, or a refusal's status.
        public var code: Int?
        /// A close frame's reason.
        public var reason: String?
        /// An SSE event's id.
        public var id: String?
        /// An SSE event's type.
        public var event: String?
        /// The request, on `open` and `refused`.
        public var request: ScriptedRequest?
        /// On a proxy route: the leg it happened on. There, `in` arrived at Duplex (from the
        /// client, or from the upstream) and `out` left it. Nil on other routes.
        public var leg: Leg?
        /// On a proxy route: what its rules did to a message that arrived (the rule that applied,
        /// or `forward`), or how a message that left came to be sent (`forwarded`, `duplicate`,
        /// `injected`, `replied`). Nil on other routes.
        public var action: String?
        /// When it happened.
        public var at: Date

        /// Creates an entry.
        public init(
            connection: Int,
            path: String,
            direction: Direction,
            kind: Kind,
            data: String? = nil,
            code: Int? = nil,
            reason: String? = nil,
            id: String? = nil,
            event: String? = nil,
            request: ScriptedRequest? = nil,
            leg: Leg? = nil,
            action: String? = nil,
            at: Date = Date()
        ) {
            self.leg = leg
            self.action = action
            self.connection = connection
            self.path = path
            self.direction = direction
            self.kind = kind
            self.data = data
            self.code = code
            self.reason = reason
            self.id = id
            self.event = event
            self.request = request
            self.at = at
        }

        public var description: String {
            var text = "#\(connection) \(path)" + (leg.map { " \($0.rawValue)" } ?? "") + " \(direction.rawValue) \(kind.rawValue)"
            if let code { text += " \(code)" }
            if let id { text += " id=\(id)" }
            if let event { text += " event=\(event)" }
            if let data { text += " \(ScriptJournal.excerpt(data).debugDescription)" }
            if let reason, !reason.isEmpty { text += " reason=\(reason.debugDescription)" }
            if let action { text += " (\(action))" }
            return text
        }

        /// The bytes it counts against the journal's data limit.
        var size: Int { 64 + (data?.utf8.count ?? 0) + (request.map { $0.headers.reduce(0) { $0 + $1.name.utf8.count + $1.value.utf8.count } } ?? 0) }
    }

    /// No entry matched within a wait's limit.
    public struct TimeoutError: Error, CustomStringConvertible {
        /// The wait's limit.
        public var limit: Duration
        /// The newest entries when it passed, at most ten.
        public var recent: [Entry]

        public var description: String {
            "no journal entry matched within \(limit); "
                + (recent.isEmpty ? "the journal is empty" : "the newest entries:\n" + recent.map { "  \($0)" }.joined(separator: "\n"))
        }
    }

    private struct Waiter {
        var matches: @Sendable (Entry) -> Bool
        var continuation: CheckedContinuation<Entry, any Error>
    }

    private struct State {
        var entries = Deque<Entry>()
        /// How many entries were ever appended: the sequence number of the next one.
        var appended = 0
        var bytes = 0
        var dropped = 0
        var lastConnection = 0
        var waiters = Waiters<Entry>()
        var matchers: [UInt64: @Sendable (Entry) -> Bool] = [:]
    }

    private let state = NIOLockedValueBox(State())
    private let maxEntries: Int
    private let maxBytes: Int
    /// Told of every entry as it is appended, outside the lock (`duplex intercept` prints them).
    private let observer: (@Sendable (Entry) -> Void)?
    /// The time an entry is stamped with as it is appended; nil: the time it was made.
    private let now: (@Sendable () -> Date)?

    /// Creates an empty journal that keeps at most `maxEntries` entries and `maxBytes` of data.
    public convenience init(maxEntries: Int = 100_000, maxBytes: Int = 64 * 1024 * 1024) {
        self.init(maxEntries: maxEntries, maxBytes: maxBytes, observer: nil)
    }

    /// A journal that also tells `observer` of every entry as it is appended, on the thread
    /// that appends it (an event loop's: keep it short).
    package init(maxEntries: Int = 100_000, maxBytes: Int = 64 * 1024 * 1024, observer: (@Sendable (Entry) -> Void)?) {
        self.maxEntries = max(1, maxEntries)
        self.maxBytes = max(1, maxBytes)
        self.observer = observer
        self.now = nil
    }

    /// A journal whose entries are stamped with `now()` as they are appended: a simulated
    /// network's virtual time.
    package init(now: @escaping @Sendable () -> Date) {
        self.maxEntries = 100_000
        self.maxBytes = 64 * 1024 * 1024
        self.observer = nil
        self.now = now
    }

    /// Every entry kept, oldest first.
    public var entries: [Entry] {
        state.withLockedValue { Array($0.entries) }
    }

    /// How many entries were let go to keep within the limits.
    public var droppedCount: Int {
        state.withLockedValue { $0.dropped }
    }

    /// Forgets every entry (connection numbers go on).
    public func removeAll() {
        state.withLockedValue { state in
            state.entries.removeAll()
            state.bytes = 0
        }
    }

    /// The first entry kept that matches, or the next one journaled, waiting at most `limit`.
    /// - Throws: ``TimeoutError`` with the newest entries when none comes in time;
    ///   `CancellationError` when the task is cancelled.
    public func first(within limit: Duration, where matches: @escaping @Sendable (Entry) -> Bool) async throws -> Entry {
        if let found = entries.first(where: matches) { return found }
        return try await withDeadline(limit, orThrow: { [self] in TimeoutError(limit: limit, recent: Array(entries.suffix(10))) }) { [self] in
            try await wait(for: matches)
        }
    }

    /// Waits for a matching entry. The test's predicate never runs under the journal's lock (it
    /// may read the journal): the entries are searched outside it, and the wait is registered
    /// only once no entry came meanwhile, else those are searched first.
    private func wait(for matches: @escaping @Sendable (Entry) -> Bool) async throws -> Entry {
        let key = state.withLockedValue { $0.waiters.reserveKey() }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                var searched = 0
                while true {
                    let (unsearched, appended) = state.withLockedValue { state in
                        (Array(state.entries.suffix(min(state.entries.count, state.appended - searched))), state.appended)
                    }
                    if let found = unsearched.first(where: matches) { return continuation.resume(returning: found) }
                    searched = appended
                    let registered: Result<Bool, any Error> = state.withLockedValue { state in
                        guard state.appended == appended else { return .success(false) }
                        // Cancelled before it could wait (the limit passed meanwhile): the
                        // cancellation handler found no waiter to resume, so it must not wait.
                        if Task.isCancelled { return .failure(CancellationError()) }
                        state.waiters.add(continuation, key: key)
                        state.matchers[key] = matches
                        return .success(true)
                    }
                    switch registered {
                    case .success(true): return
                    case .success(false): continue
                    case .failure(let error): return continuation.resume(throwing: error)
                    }
                }
            }
        } onCancel: {
            let waiter = state.withLockedValue { state in
                state.matchers[key] = nil
                return state.waiters.remove(key)
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    /// A number for a new connection.
    func newConnection() -> Int {
        state.withLockedValue { state in
            state.lastConnection += 1
            return state.lastConnection
        }
    }

    /// Adds `entry`, letting the oldest go past the limits, and wakes the waits it matches.
    /// The waits' predicates run after the lock is let go (a predicate may read the journal).
    func append(_ entry: Entry) {
        var entry = entry
        if let now { entry.at = now() }
        let matchers = state.withLockedValue { [entry] state in
            state.entries.append(entry)
            state.appended += 1
            state.bytes += entry.size
            while state.entries.count > maxEntries || (state.bytes > maxBytes && state.entries.count > 1) {
                let old = state.entries.removeFirst()
                state.bytes -= old.size
                state.dropped += 1
            }
            return state.matchers
        }
        observer?(entry)
        // Most entries have no wait for them: nothing to filter, nothing allocated.
        guard !matchers.isEmpty else { return }
        let matching = matchers.filter { $0.value(entry) }.map(\.key)
        guard !matching.isEmpty else { return }
        let woken: [CheckedContinuation<Entry, any Error>] = state.withLockedValue { state in
            matching.compactMap { key in
                state.matchers[key] = nil
                return state.waiters.remove(key)
            }
        }
        for continuation in woken { continuation.resume(returning: entry) }
    }

    /// The entries as a JSON array, oldest first.
    func json() -> Data {
        (try? Self.encoder().encode(entries)) ?? Data("[]".utf8)
    }

    /// One entry as `GET /_journal` writes it, on one line.
    package static func jsonLine(_ entry: Entry) -> String {
        String(decoding: (try? encoder().encode(entry)) ?? Data("{}".utf8), as: UTF8.self)
    }

    /// The journal's JSON: keys sorted, times in ISO 8601 with milliseconds.
    private static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
        }
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    /// `text` cut to 200 characters for a message or a description.
    static func excerpt(_ text: String) -> String {
        text.count > 200 ? String(text.prefix(200)) + "…" : text
    }
}
