import Duplex
import DuplexHost
import DuplexSchema
import Foundation
import NIOCore
import NIOWebSocket

/// One proxied WebSocket connection, served on the client connection's event loop: the upstream
/// (the Duplex client, connected before the client's upgrade was answered) on one side, the
/// client on the other, the route's rules applied to each message on its way.
///
/// Each direction takes one message at a time: a client's next message is read once the rules
/// are done with the one before it and the upstream took what they sent (``EventLoopWebSocketHandler/hold()``);
/// the upstream's next message is taken once the client's channel can take more. So a `delayMs`
/// holds back the later messages of its direction, order is kept both ways, and a side that does
/// not read holds the other back through TCP: nothing is buffered without bound here.
///
/// Every message is journaled twice, once per leg: where it arrived (with what the rules did to
/// it) and where it went (forwarded, injected, replied).
final class ProxyWebSocketService: EventLoopWebSocketService {
    var connectionInfo: ConnectionInfo { .init(kind: .webSocket, route: name) }

    private let upstream: WebSocket
    private let events: AsyncStream<WebSocketEvent>
    private let script: ProxyScript
    private let breakpoints: ProxyBreakpoints
    private let journal: ScriptJournal?
    private let tap: (any ProxySessionTap)?
    private let connection: Int
    private let path: String
    private let name: String
    private let loop: any EventLoop
    private var handler: EventLoopWebSocketHandler?
    private var context: ChannelHandlerContext?
    /// The task that forwards the upstream's messages, waiting for the client to read.
    private var writableWaiter: CheckedContinuation<Void, Never>?
    /// The last operation on the upstream: the next one waits for it.
    private var lastUpstreamOperation: Task<Void, Never>?
    /// How many messages arrived each way, for `nth`.
    private var arrived = (toUpstream: 0, toClient: 0)
    /// A rule closed or dropped the connection: nothing more is forwarded either way.
    private var finished = false
    /// The messages breakpoints hold: let go when the connection ends.
    private var heldMessages: [HeldMessage] = []

    init(
        upstream: WebSocket, events: AsyncStream<WebSocketEvent>, proxy: ProxyRouteState, journal: ScriptJournal?, tap: (any ProxySessionTap)?,
        connection: Int,
        path: String, name: String, eventLoop: any EventLoop
    ) {
        self.loop = eventLoop
        self.upstream = upstream
        self.events = events
        self.script = proxy.script
        self.breakpoints = proxy.breakpoints
        self.tap = tap
        self.journal = journal
        self.connection = connection
        self.path = path
        self.name = name
    }

    func start(handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        self.handler = handler
        self.context = context
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let loop = context.eventLoop
        let events = self.events
        Task { await ProxyWebSocketService.forward(events, loop: loop, bound: bound) }
    }

    /// Hands the upstream's messages to the rules, one at a time, until the upstream closes or
    /// is gone; then closes the client's connection as the upstream closed.
    private static func forward(_ events: AsyncStream<WebSocketEvent>, loop: any EventLoop, bound: NIOLoopBound<ProxyWebSocketService>) async {
        for await event in events {
            switch event {
            case .message(let message):
                let scripted: ScriptedMessage
                switch message {
                case .string(let text): scripted = .text(text)
                case .data(let data): scripted = .binary(data)
                }
                // Once the rules are done with it and the client's channel can take more.
                let writable = (try? await loop.flatSubmit { bound.value.arrived(scripted, .toClient) }.get()) ?? true
                if !writable {
                    await withCheckedContinuation { continuation in
                        loop.execute { bound.value.resumeWhenWritable(continuation) }
                    }
                }
            case .disconnected(let code, let reason):
                loop.execute { bound.value.upstreamClosed(code: code, reason: reason ?? "") }
                return
            case .connected, .error:
                break
            }
        }
        // The upstream's stream ended with no word of its close (it was terminated): the client's
        // connection goes too, unless it is already over.
        loop.execute { bound.value.upstreamClosed(code: nil, reason: "") }
    }

    // MARK: Both directions

    /// A message arrived from the sender of `direction`: a breakpoint that matches holds it
    /// first; then the first rule that matches it is applied (none: it is forwarded). The future
    /// completes once the rules are done with it, with whether the client's channel can take more.
    private func arrived(_ message: ScriptedMessage, _ direction: ProxyDirection) -> EventLoopFuture<Bool> {
        tap?.message(message, from: direction == .toUpstream ? .client : .upstream)
        let number: Int
        switch direction {
        case .toUpstream:
            arrived.toUpstream += 1
            number = arrived.toUpstream
        case .toClient:
            arrived.toClient += 1
            number = arrived.toClient
        }
        guard !finished else {
            note(message, leg: direction == .toUpstream ? .client : .upstream, direction: .in, action: "arrived after the end: not forwarded")
            return loop.makeSucceededFuture(true)
        }
        guard breakpoints.watches(direction), let breakpoint = breakpoints.take(direction, message) else {
            return applyRules(message, direction, number: number, held: nil)
        }
        return hold(message, direction, number: number, breakpoint: breakpoint)
    }

    /// Holds `message` for the test that set `breakpoint`, until it answers or the breakpoint's
    /// limit passes; then the rules apply to what it let go.
    private func hold(
        _ message: ScriptedMessage, _ direction: ProxyDirection, number: Int, breakpoint: ProxyBreakpoint
    ) -> EventLoopFuture<Bool> {
        let promise = loop.makePromise(of: HeldMessage.Release.self)
        let bound = NIOLoopBound(self, eventLoop: loop)
        let loop = self.loop
        let held = HeldMessage(
            message: message, direction: direction, connection: connection,
            release: { outcome in promise.succeed(outcome) },
            inject: { injected in loop.execute { bound.value.deliver(injected, direction, as: "injected at a breakpoint") } }
        )
        guard breakpoint.fire(held) else { return applyRules(message, direction, number: number, held: nil) }
        heldMessages.append(held)
        let limit = loop.scheduleTask(in: TimeAmount(breakpoint.holdingAtMost)) { held.settle(.unanswered) }
        return promise.futureResult.flatMap { outcome in
            limit.cancel()
            let service = bound.value
            service.heldMessages.removeAll { $0 === held }
            switch outcome {
            case .forward(let released):
                let what = released == message ? "the test forwarded it" : "the test replaced it with \(released.excerpt.debugDescription)"
                return service.applyRules(released, direction, number: number, held: "held at a breakpoint; \(what)", arrivedAs: message)
            case .drop, .connectionEnded:
                let what = outcome == .drop ? "the test dropped it" : "the connection ended"
                service.note(message, leg: direction == .toUpstream ? .client : .upstream, direction: .in, action: "held at a breakpoint; \(what)")
                return loop.makeSucceededFuture(service.isWritable)
            case .unanswered:
                let limit = breakpoint.holdingAtMost
                return service.applyRules(message, direction, number: number, held: "held at a breakpoint; unanswered after \(limit), let go")
            }
        }
    }

    /// Applies the first rule that matches `message`, the `number`th of its direction; `held`
    /// says what a breakpoint did to it first, and `original` is what arrived when the breakpoint
    /// replaced it (the journal has what arrived).
    private func applyRules(
        _ message: ScriptedMessage, _ direction: ProxyDirection, number: Int, held: String?, arrivedAs original: ScriptedMessage? = nil
    ) -> EventLoopFuture<Bool> {
        let rules = direction == .toUpstream ? script.toUpstream : script.toClient
        let rule = rules.first { $0.match.matches(message, number: number) }
        let action = rule.map { "\($0)" } ?? "forward"
        note(
            original ?? message, leg: direction == .toUpstream ? .client : .upstream, direction: .in,
            action: held.map { "\($0); \(action)" } ?? action)
        guard !finished else { return loop.makeSucceededFuture(true) }
        guard let rule else {
            deliver(message, direction, as: "forwarded")
            return loop.makeSucceededFuture(isWritable)
        }
        return step(rule.actions[...], RuleRun(message: message, forwards: !rule.actions.contains(.forward(false))), direction)
    }

    /// What a rule's run has done so far to its message.
    private struct RuleRun {
        var message: ScriptedMessage
        var forwards: Bool
        var copies = 1
        var unchanged: String?
    }

    /// Runs `actions` in order from the first; a delay goes on from the next after it.
    private func step(_ actions: ArraySlice<ProxyAction>, _ run: RuleRun, _ direction: ProxyDirection) -> EventLoopFuture<Bool> {
        var (rest, run) = (actions, run)
        while let action = rest.popFirst() {
            guard !finished else { return loop.makeSucceededFuture(true) }
            switch action.step {
            case .delay(let duration):
                let bound = NIOLoopBound((self, run, rest), eventLoop: loop)
                return loop.flatScheduleTask(in: TimeAmount(duration)) {
                    let (service, run, rest) = bound.value
                    return service.step(rest, run, direction)
                }.futureResult
            case .replace(let replacement):
                run.message = replacement
            case .set(let fields):
                if case .text(let text) = run.message, case .object(var members)? = JSONValue(text) {
                    for (key, value) in fields { members[key] = value }
                    run.message = .text(JSONValue.object(members).jsonText)
                } else {
                    run.unchanged = "not a JSON object: forwarded unchanged"
                }
            case .send(let injected):
                deliver(injected, direction, as: "injected")
            case .reply(let reply):
                deliver(reply, direction == .toUpstream ? .toClient : .toUpstream, as: "replied")
            case .forward:
                break
            case .duplicate:
                run.copies = 2
            case .close(let code, let reason):
                closeBoth(code: code, reason: reason)
                return loop.makeSucceededFuture(true)
            case .drop:
                dropBoth()
                return loop.makeSucceededFuture(true)
            }
        }
        if run.forwards && !finished {
            for copy in 0..<run.copies {
                deliver(run.message, direction, as: run.unchanged ?? (copy == 0 ? "forwarded" : "duplicate"))
            }
        }
        return loop.makeSucceededFuture(isWritable)
    }

    /// Sends `message` the way `direction` goes, journaled on the leg it leaves by.
    private func deliver(_ message: ScriptedMessage, _ direction: ProxyDirection, as action: String) {
        switch direction {
        case .toClient:
            note(message, leg: .client, direction: .out, action: action)
            guard let handler, let context else { return }
            switch message {
            case .text(let text): handler.send(ByteBuffer(string: text), opcode: .text, context: context)
            case .binary(let data): handler.send(ByteBuffer(bytes: data), opcode: .binary, context: context)
            }
            handler.flush(context: context)
        case .toUpstream:
            note(message, leg: .upstream, direction: .out, action: action)
            let forwarded: WebSocketMessage
            switch message {
            case .text(let text): forwarded = .string(text)
            case .binary(let data): forwarded = .data(data)
            }
            // A failure means the upstream is gone: its end reaches the client through the task
            // that reads its events.
            onUpstream { upstream in try? await upstream.send(forwarded) }
        }
    }

    /// A rule's `close`: the client's connection with `code`, the upstream's normally.
    private func closeBoth(code: UInt16, reason: String) {
        finished = true
        journal?.append(.init(connection: connection, path: path, direction: .out, kind: .close, code: Int(code), reason: reason, leg: .client))
        journal?.append(.init(connection: connection, path: path, direction: .out, kind: .close, code: 1000, leg: .upstream))
        onUpstream { upstream in await upstream.disconnect(code: .normalClosure, reason: "") }
        guard let handler, let context else { return }
        handler.close(code: WebSocketCloseCode(rawValue: code), reason: reason, context: context)
    }

    /// A rule's `drop`: both connections end with no close frame.
    private func dropBoth() {
        finished = true
        journal?.append(.init(connection: connection, path: path, direction: .out, kind: .drop, leg: .client))
        journal?.append(.init(connection: connection, path: path, direction: .out, kind: .drop, leg: .upstream))
        onUpstream { upstream in upstream.abort() }
        guard let handler, let context else { return }
        handler.drop(context: context)
    }

    private var isWritable: Bool {
        context?.channel.isWritable ?? true
    }

    /// Runs `operation` on the upstream once the operations asked for before it are done.
    private func onUpstream(_ operation: @escaping @Sendable (WebSocket) async -> Void) {
        let previous = lastUpstreamOperation
        let upstream = self.upstream
        lastUpstreamOperation = Task {
            await previous?.value
            await operation(upstream)
        }
    }

    private func note(_ message: ScriptedMessage, leg: ScriptJournal.Entry.Leg, direction: ScriptJournal.Entry.Direction, action: String) {
        let (kind, data): (ScriptJournal.Entry.Kind, String) =
            switch message {
            case .text(let text): (.text, text)
            case .binary(let bytes): (.binary, bytes.base64EncodedString())
            }
        journal?.append(.init(connection: connection, path: path, direction: direction, kind: kind, data: data, leg: leg, action: action))
    }

    // MARK: The upstream's side

    /// Resumes `continuation` once the client's channel is writable, or the connection ended.
    private func resumeWhenWritable(_ continuation: CheckedContinuation<Void, Never>) {
        guard let context, !context.channel.isWritable else {
            continuation.resume()
            return
        }
        writableWaiter = continuation
    }

    func writable() {
        writableWaiter?.resume()
        writableWaiter = nil
    }

    private func upstreamClosed(code: WebSocketCloseCode?, reason: String) {
        guard !finished else { return }
        if let code { tap?.closed(by: .upstream, code: code.rawValue, reason: reason) } else { tap?.dropped(by: .upstream) }
        finished = true
        journal?.append(
            .init(
                connection: connection, path: path, direction: .in, kind: code == nil ? .drop : .close, code: code.map { Int($0.rawValue) },
                reason: code == nil ? nil : reason, leg: .upstream))
        guard let handler, let context else { return }
        if let code {
            handler.close(code: code, reason: reason, context: context)
        } else {
            handler.drop(context: context)
        }
    }

    // MARK: The client's side

    func receive(_ message: consuming ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        let scripted: ScriptedMessage = opcode == .text ? .text(String(buffer: message)) : .binary(Data(message.readableBytesView))
        // One message at a time: the next is read once the rules are done with this one and the
        // upstream took what they sent it.
        handler.hold()
        let bound = NIOLoopBound((self, handler, context), eventLoop: context.eventLoop)
        arrived(scripted, .toUpstream).whenComplete { _ in
            let (service, _, _) = bound.value
            service.onUpstream { [loop = service.loop] _ in
                loop.execute {
                    let (_, handler, context) = bound.value
                    handler.release(context: context)
                }
            }
        }
    }

    /// A message the client sent before its close, which the handler did not hand over while
    /// the one before it was on its way: forwarded all the same, through the rules.
    func discarded(_ message: ByteBuffer, opcode: WebSocketOpcode) {
        guard context != nil else { return }
        _ = arrived(opcode == .text ? .text(String(buffer: message)) : .binary(Data(message.readableBytesView)), .toUpstream)
    }

    func peerClosed(code: WebSocketCloseCode?, reason: String) {
        tap?.closed(by: .client, code: code?.rawValue, reason: reason)
        journal?.append(
            .init(connection: connection, path: path, direction: .in, kind: .close, code: code.map { Int($0.rawValue) }, reason: reason, leg: .client)
        )
        guard !finished else { return }
        finished = true
        journal?.append(
            .init(
                connection: connection, path: path, direction: .out, kind: .close, code: code.map { Int($0.rawValue) }, reason: reason, leg: .upstream
            ))
        onUpstream { upstream in await upstream.disconnect(code: code ?? .normalClosure, reason: reason) }
    }

    func stall(for duration: Duration) {}

    func closing() {}

    func end() {
        // After a close, the tap's session has ended: this records nothing more.
        tap?.dropped(by: .client)
        let closedWithoutFrame = !finished
        if !finished {
            // The client went without a close frame: the upstream goes too.
            finished = true
            journal?.append(.init(connection: connection, path: path, direction: .in, kind: .drop, leg: .client))
        }
        handler = nil
        context = nil
        writable()
        for held in heldMessages { held.settle(.connectionEnded) }
        // A client gone without a close frame takes the upstream's connection the same way;
        // after a close, the upstream's close handshake is under way and this ends the socket.
        let vanished = closedWithoutFrame
        onUpstream { upstream in if vanished { upstream.abort() } else { await upstream.terminate() } }
    }
}
