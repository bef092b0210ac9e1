import DuplexWire
import NIOConcurrencyHelpers

/// The way a message goes through a proxy route.
public enum ProxyDirection: String, Sendable, CaseIterable {
    /// From the client to the upstream.
    case toUpstream
    /// From the upstream to the client.
    case toClient
}

/// A message a breakpoint holds (``ScriptedRoute/intercept(_:within:holdingAtMost:where:)``): its
/// direction stops until the test lets it go, so the messages after it wait, in order.
///
/// Answer it once: ``forward()``, ``forward(replacing:)`` or ``drop()``; ``inject(_:)`` sends a
/// message before it, as often as you like. A held message no one answers goes on after the
/// limit the breakpoint was set with, and the journal says so; one whose connection ends is let go.
public final class HeldMessage: Sendable, CustomStringConvertible {
    /// What the test decided.
    enum Release: Sendable, Equatable {
        case forward(ScriptedMessage)
        case drop
        case unanswered
        case connectionEnded
    }

    /// The message, as its sender sent it.
    public let message: ScriptedMessage
    /// Which way it was going.
    public let direction: ProxyDirection
    /// The connection's number in the journal.
    public let connection: Int
    private let release: NIOLockedValueBox<(@Sendable (Release) -> Void)?>
    private let injector: @Sendable (ScriptedMessage) -> Void

    init(
        message: ScriptedMessage, direction: ProxyDirection, connection: Int, release: @escaping @Sendable (Release) -> Void,
        inject: @escaping @Sendable (ScriptedMessage) -> Void
    ) {
        self.message = message
        self.direction = direction
        self.connection = connection
        self.release = NIOLockedValueBox(release)
        self.injector = inject
    }

    /// Lets the message go on, to the route's rules and then its receiver.
    public func forward() {
        settle(.forward(message))
    }

    /// Lets `text` go on instead, to the route's rules and then the receiver.
    public func forward(replacing text: String) {
        settle(.forward(.text(text)))
    }

    /// Drops the message: its receiver never gets it.
    public func drop() {
        settle(.drop)
    }

    /// Sends `text` to the message's receiver now, before the held message.
    public func inject(_ text: String) {
        injector(.text(text))
    }

    /// Whether the message was let go (by the test, its limit, or the connection's end).
    public var isReleased: Bool {
        release.withLockedValue { $0 == nil }
    }

    public var description: String {
        "message #\(connection) \(direction.rawValue): \(message.excerpt.debugDescription)"
    }

    /// Lets the message go as `outcome` says; the first answer counts.
    func settle(_ outcome: Release) {
        let release = self.release.withLockedValue { release in
            defer { release = nil }
            return release
        }
        release?(outcome)
    }
}

/// No message matched a breakpoint within its limit.
public struct InterceptTimeoutError: Error, Sendable, CustomStringConvertible {
    /// The direction the breakpoint watched.
    public var direction: ProxyDirection
    /// The limit.
    public var limit: Duration

    public var description: String { "no message \(direction.rawValue) matched the breakpoint within \(limit)" }
}

/// A breakpoint on a proxy route (``ScriptedRoute/breakpoint(_:holdingAtMost:where:)``): it holds
/// the first message going its way that matches, from the moment it is set, and hands it to
/// ``held(within:)``. It holds one message, then is gone.
public final class ProxyBreakpoint: Sendable {
    private enum State {
        case armed(CheckedContinuation<HeldMessage, any Error>?)
        case fired(HeldMessage)
        case done
    }

    /// The way the messages it watches go.
    public let direction: ProxyDirection
    /// How long a message it holds waits for the test's answer before it goes on.
    public let holdingAtMost: Duration
    let matches: @Sendable (ScriptedMessage) -> Bool
    private let state = NIOLockedValueBox(State.armed(nil))
    private let registry: ProxyBreakpoints

    init(direction: ProxyDirection, holdingAtMost: Duration, matches: @escaping @Sendable (ScriptedMessage) -> Bool, registry: ProxyBreakpoints) {
        self.direction = direction
        self.holdingAtMost = holdingAtMost
        self.matches = matches
        self.registry = registry
    }

    /// The message it holds, once one matched, waiting at most `limit`; the breakpoint is
    /// removed when none came in time (a message that matches later goes on unheld).
    /// - Throws: ``InterceptTimeoutError``; `CancellationError` when the task is cancelled.
    public func held(within limit: Duration = .seconds(10)) async throws -> HeldMessage {
        do {
            return try await withDeadline(limit, orThrow: { [direction] in InterceptTimeoutError(direction: direction, limit: limit) }) {
                [state] in
                try await withTaskCancellationHandler {
                    try await withCheckedThrowingContinuation { continuation in
                        let result = state.withLockedValue { state -> Result<HeldMessage, any Error>? in
                            switch state {
                            case .fired(let held):
                                state = .done
                                return .success(held)
                            case .done:
                                return .failure(ScriptError(path: "", "this breakpoint already gave its message, or was removed"))
                            case .armed(let waiter):
                                if waiter != nil { return .failure(ScriptError(path: "", "someone already waits on this breakpoint")) }
                                if Task.isCancelled { return .failure(CancellationError()) }
                                state = .armed(continuation)
                                return nil
                            }
                        }
                        if let result { continuation.resume(with: result) }
                    }
                } onCancel: {
                    let waiter = state.withLockedValue { state -> CheckedContinuation<HeldMessage, any Error>? in
                        guard case .armed(let waiter?) = state else { return nil }
                        state = .armed(nil)
                        return waiter
                    }
                    waiter?.resume(throwing: CancellationError())
                }
            }
        } catch {
            remove()
            throw error
        }
    }

    /// Removes the breakpoint: no message is held by it from now on.
    public func remove() {
        registry.remove(self)
        state.withLockedValue { state in
            if case .armed = state { state = .done }
        }
    }

    /// Hands `held` to the test (now, or when it asks); false when the breakpoint was removed.
    func fire(_ held: HeldMessage) -> Bool {
        let (fired, waiter) = state.withLockedValue { state -> (Bool, CheckedContinuation<HeldMessage, any Error>?) in
            guard case .armed(let waiter) = state else { return (false, nil) }
            state = waiter == nil ? .fired(held) : .done
            return (true, waiter)
        }
        waiter?.resume(returning: held)
        return fired
    }
}

/// The breakpoints set on one proxy route, in the order they were set.
final class ProxyBreakpoints: Sendable {
    private let set = NIOLockedValueBox<[ProxyBreakpoint]>([])

    func add(_ breakpoint: ProxyBreakpoint) {
        set.withLockedValue { $0.append(breakpoint) }
    }

    func remove(_ breakpoint: ProxyBreakpoint) {
        set.withLockedValue { $0.removeAll { $0 === breakpoint } }
    }

    /// Whether any breakpoint watches `direction` (a cheap check before a message is offered).
    func watches(_ direction: ProxyDirection) -> Bool {
        set.withLockedValue { set in set.contains { $0.direction == direction } }
    }

    /// The first breakpoint set for `direction` that `message` matches, taken off the route. The
    /// predicates run outside the lock.
    func take(_ direction: ProxyDirection, _ message: ScriptedMessage) -> ProxyBreakpoint? {
        let candidates = set.withLockedValue { set in set.filter { $0.direction == direction } }
        for breakpoint in candidates where breakpoint.matches(message) {
            let taken = set.withLockedValue { set -> Bool in
                guard let index = set.firstIndex(where: { $0 === breakpoint }) else { return false }
                set.remove(at: index)
                return true
            }
            if taken { return breakpoint }
        }
        return nil
    }
}

extension ScriptedRoute {
    /// Sets a breakpoint on this proxy route, at once: the next message going `direction` (on any
    /// of its connections) that `matches` is held, and the later ones of its direction on its
    /// connection wait behind it, until the test answers the ``HeldMessage``
    /// (``ProxyBreakpoint/held(within:)`` gives it): ``HeldMessage/forward()``,
    /// ``HeldMessage/forward(replacing:)``, ``HeldMessage/drop()``, and ``HeldMessage/inject(_:)``
    /// before it. Set it before the message can come (before the send that causes it, say).
    ///
    /// A breakpoint is the message's first stop: a message let go goes on to the route's rules.
    /// On an SSE proxy route, the messages are the upstream's events going ``ProxyDirection/toClient``,
    /// each as its data (text): a replacement keeps the event's `id:` and `event:`, and an
    /// injected one is an event with that data.
    /// - Parameters:
    ///   - direction: the way the message goes.
    ///   - holdingAtMost: how long a held message waits if the test never answers: it then goes
    ///     on, and the journal says so.
    ///   - matches: which message; any by default.
    /// - Throws: ``ScriptError`` when this is not a proxy route.
    public func breakpoint(
        _ direction: ProxyDirection,
        holdingAtMost: Duration = .seconds(10),
        where matches: @escaping @Sendable (ScriptedMessage) -> Bool = { _ in true }
    ) throws(ScriptError) -> ProxyBreakpoint {
        guard case .proxy(let proxy) = kind else {
            throw ScriptError(path: "", "\(self) is not a proxy route: only a proxy route's messages can be intercepted")
        }
        let breakpoint = ProxyBreakpoint(direction: direction, holdingAtMost: holdingAtMost, matches: matches, registry: proxy.breakpoints)
        proxy.breakpoints.add(breakpoint)
        return breakpoint
    }

    /// Sets a breakpoint (``breakpoint(_:holdingAtMost:where:)``) and waits for the message it
    /// holds: for a message that comes after the call, such as the upstream's next push.
    ///
    /// ```swift
    /// let held = try await route.intercept(.toClient, within: .seconds(5)) { $0.text?.contains("quote") == true }
    /// held.inject(#"{"type":"notice"}"#)
    /// held.forward(replacing: #"{"type":"quote","price":0}"#)
    /// ```
    /// - Parameters:
    ///   - direction: the way the message goes.
    ///   - limit: how long to wait for a matching message; the breakpoint is removed after it.
    ///   - holdingAtMost: how long the message is held if the test never answers.
    ///   - matches: which message; any by default.
    /// - Returns: the held message.
    /// - Throws: ``InterceptTimeoutError`` when no message matched within `limit`;
    ///   ``ScriptError`` when this is not a proxy route.
    public func intercept(
        _ direction: ProxyDirection,
        within limit: Duration = .seconds(10),
        holdingAtMost: Duration = .seconds(10),
        where matches: @escaping @Sendable (ScriptedMessage) -> Bool = { _ in true }
    ) async throws -> HeldMessage {
        try await breakpoint(direction, holdingAtMost: holdingAtMost, where: matches).held(within: limit)
    }
}
