import Duplex
import DuplexHost
import DuplexSchema
import Foundation
import NIOCore
import NIOWebSocket

/// One proxied WebSocket connection, served on the client connection's event loop: the upstream
/// (connected before the client's upgrade was answered, on the same loop, ``ProxyUpstreamLeg``)
/// on one side, the client on the other, the route's rules applied to each message on its way.
/// No task, stream or hop per message: a message no rule holds back is written to the other side
/// in the turn it was read.
///
/// Each direction takes one message at a time: while the rules hold one back (a `delayMs`, a
/// breakpoint), the next waits, and its side is not read meanwhile; the client is not read while
/// the upstream's connection is above its high watermark, nor the upstream while the client's
/// channel is not writable. So order is kept both ways, and a side that does not read holds the
/// other back through TCP: nothing is buffered without bound here.
///
/// Every message is journaled twice, once per leg: where it arrived (with what the rules did to
/// it) and where it went (forwarded, injected, replied).
final class ProxyWebSocketService: EventLoopWebSocketService {
    var connectionInfo: ConnectionInfo { .init(kind: .webSocket, route: name) }

    let upstream: any WebSocketTransportConnection
    private let leg: ProxyUpstreamLeg
    private let script: ProxyScript
    private let breakpoints: ProxyBreakpoints
    let journal: ScriptJournal?
    private let tap: (any ProxySessionTap)?
    let connection: Int
    let path: String
    private let name: String
    let loop: any EventLoop
    var handler: EventLoopWebSocketHandler?
    var context: ChannelHandlerContext?
    /// What the upstream sent that the rules have not taken yet: at most one read's worth.
    private var fromUpstream: [ProxyUpstreamLeg.Event] = []
    private var fromUpstreamIndex = 0
    /// The rules hold back a message of the upstream's (a delay, a breakpoint).
    private var upstreamMessageHeld = false
    /// The upstream's connection is above its high watermark: the client is not read until it
    /// drains.
    var upstreamFull = false
    /// The client's reads wait for the upstream to drain.
    private var clientHeldForUpstream = false
    /// The rules hold back a message of the client's (a delay, a breakpoint).
    private var clientMessageHeld = false
    /// Messages the client sent before its close that came while one was held back: they follow
    /// it, in order.
    private var clientBacklog: [ScriptedMessage] = []
    /// The client's close, passed to the upstream once the messages before it went.
    private var clientClose: (code: WebSocketCloseCode?, reason: String)?
    /// How many messages arrived each way, for `nth`.
    private var arrived = (toUpstream: 0, toClient: 0)
    /// A rule closed or dropped the connection, or a side ended it: nothing more is forwarded.
    var finished = false
    /// The messages breakpoints hold: let go when the connection ends.
    private var heldMessages: [HeldMessage] = []
    /// Whether the client's pings are answered (a rule's `answerPings`).
    private var answersPings = true
    /// A flush of what was written to the client is queued behind this event-loop turn.
    var clientFlushQueued = false

    init(
        upstream: any WebSocketTransportConnection, leg: ProxyUpstreamLeg, proxy: ProxyRouteState, journal: ScriptJournal?,
        tap: (any ProxySessionTap)?, connection: Int, path: String, name: String, eventLoop: any EventLoop
    ) {
        self.loop = eventLoop
        self.upstream = upstream
        self.leg = leg
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
        leg.attach(self)
        readUpstreamIfReady()
    }

    // MARK: The upstream's side

    /// What the upstream did, in order: the rules take its messages one at a time.
    func upstream(_ event: ProxyUpstreamLeg.Event) {
        fromUpstream.append(event)
        takeFromUpstream()
    }

    /// Hands what the upstream sent to the rules, until one holds a message back or none is left.
    private func takeFromUpstream() {
        while !upstreamMessageHeld, fromUpstreamIndex < fromUpstream.count {
            let event = fromUpstream[fromUpstreamIndex]
            fromUpstreamIndex += 1
            switch event {
            case .message(let message):
                guard let later = arrived(message, .toClient) else { continue }
                upstreamMessageHeld = true
                let bound = NIOLoopBound(self, eventLoop: loop)
                later.whenComplete { _ in
                    bound.value.upstreamMessageHeld = false
                    bound.value.takeFromUpstream()
                }
            case .closed(let code, let reason, let failed):
                upstreamClosed(code: code, reason: reason, failed: failed)
            }
        }
        if fromUpstreamIndex == fromUpstream.count {
            fromUpstream.removeAll(keepingCapacity: fromUpstream.count <= 16)
            fromUpstreamIndex = 0
        }
        readUpstreamIfReady()
    }

    /// Reads the upstream again once the rules took all it sent and the client's channel can take
    /// more (after the end, at once: its close handshake needs reading).
    private func readUpstreamIfReady() {
        let ready = !upstreamMessageHeld && fromUpstream.isEmpty && (finished || isWritable)
        if leg.setReading(ready), ready { upstream.resumeReading() }
    }

    func writable() {
        readUpstreamIfReady()
    }

    /// The upstream's connection drained below its low watermark: the client is read again.
    func upstreamDrained() {
        upstreamFull = false
        guard clientHeldForUpstream, let handler, let context else { return }
        clientHeldForUpstream = false
        handler.release(context: context)
    }

    private func upstreamClosed(code: WebSocketCloseCode?, reason: String, failed: Bool) {
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
        } else if failed {
            // Duplex failed the upstream for breaking the protocol: RFC 6455's code for a gateway
            // that had an invalid response from its upstream.
            handler.close(code: WebSocketCloseCode(rawValue: 1014), reason: "the upstream broke the WebSocket protocol", context: context)
        } else {
            handler.drop(context: context)
        }
    }

    // MARK: Both directions

    /// A message arrived from the sender of `direction`: a breakpoint that matches holds it
    /// first; then the first rule that matches it is applied (none: it is forwarded). Nil when the
    /// rules are done with it already; else a future that completes once they are.
    private func arrived(_ message: ScriptedMessage, _ direction: ProxyDirection) -> EventLoopFuture<Void>? {
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
            return nil
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
    ) -> EventLoopFuture<Void>? {
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
                    ?? loop.makeSucceededVoidFuture()
            case .drop, .connectionEnded:
                let what = outcome == .drop ? "the test dropped it" : "the connection ended"
                service.note(message, leg: direction == .toUpstream ? .client : .upstream, direction: .in, action: "held at a breakpoint; \(what)")
                return loop.makeSucceededVoidFuture()
            case .unanswered:
                let limit = breakpoint.holdingAtMost
                return service.applyRules(message, direction, number: number, held: "held at a breakpoint; unanswered after \(limit), let go")
                    ?? loop.makeSucceededVoidFuture()
            }
        }
    }

    /// Applies the first rule that matches `message`, the `number`th of its direction; `held`
    /// says what a breakpoint did to it first, and `original` is what arrived when the breakpoint
    /// replaced it (the journal has what arrived).
    private func applyRules(
        _ message: ScriptedMessage, _ direction: ProxyDirection, number: Int, held: String?, arrivedAs original: ScriptedMessage? = nil
    ) -> EventLoopFuture<Void>? {
        let rules = direction == .toUpstream ? script.toUpstream : script.toClient
        let rule = rules.first { $0.match.matches(message, number: number) }
        let action = rule.map { "\($0)" } ?? "forward"
        note(
            original ?? message, leg: direction == .toUpstream ? .client : .upstream, direction: .in,
            action: held.map { "\($0); \(action)" } ?? action)
        guard !finished else { return nil }
        guard let rule else {
            deliver(message, direction, as: "forwarded")
            return nil
        }
        return step(rule.actions[...], RuleRun(message: message, forwards: !rule.actions.contains(.forward(false))), direction)
    }

    /// What a rule's run has done so far to its message.
    private struct RuleRun {
        var message: ScriptedMessage
        var forwards: Bool
        var copies = 1
        var frames = 1
        var unchanged: String?
    }

    /// Runs `actions` in order from the first; a delay goes on from the next after it. Nil when
    /// the run ended without one.
    private func step(_ actions: ArraySlice<ProxyAction>, _ run: RuleRun, _ direction: ProxyDirection) -> EventLoopFuture<Void>? {
        var (rest, run) = (actions, run)
        while let action = rest.popFirst() {
            guard !finished else { return nil }
            switch action.step {
            case .delay(let duration):
                let bound = NIOLoopBound((self, run, rest), eventLoop: loop)
                return loop.flatScheduleTask(in: TimeAmount(duration)) {
                    let (service, run, rest) = bound.value
                    return service.step(rest, run, direction) ?? service.loop.makeSucceededVoidFuture()
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
                return nil
            case .drop:
                dropBoth()
                return nil
            case .fragment(let frames):
                run.frames = frames
            case .fault(let fault):
                sendClient(fault)
            case .answerPings(let answers):
                answersPings = answers
            case .cut, .hang:
                // SSE only: refused by ProxyScript.validate() for a WebSocket route.
                break
            }
        }
        if run.forwards && !finished {
            for copy in 0..<run.copies {
                deliver(run.message, direction, as: run.unchanged ?? (copy == 0 ? "forwarded" : "duplicate"), frames: run.frames)
            }
        }
        return nil
    }

    // MARK: The client's side

    func receive(_ message: consuming ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        // One message at a time: the next is read once the rules are done with this one and the
        // upstream can take more.
        guard takeFromClient(.init(message, opcode: opcode)) else {
            holdClientWhileUpstreamIsFull(handler)
            return
        }
        handler.hold()
    }

    /// Hands a message of the client's to the rules; true when they hold it back, and the client's
    /// next message waits for it (``clientMessageDone()``).
    private func takeFromClient(_ message: ScriptedMessage) -> Bool {
        guard let later = arrived(message, .toUpstream) else { return false }
        clientMessageHeld = true
        let bound = NIOLoopBound(self, eventLoop: loop)
        later.whenComplete { _ in bound.value.clientMessageDone() }
        return true
    }

    /// The rules are done with the client's message they held back: what came after it goes on,
    /// then the client's close if it sent one, else the client is read again (once the upstream
    /// can take more).
    private func clientMessageDone() {
        clientMessageHeld = false
        while !clientBacklog.isEmpty {
            if takeFromClient(clientBacklog.removeFirst()) { return }
        }
        if let close = clientClose {
            clientClose = nil
            passClientClose(code: close.code, reason: close.reason)
            return
        }
        guard let handler, let context else { return }
        if upstreamFull {
            clientHeldForUpstream = true
        } else {
            handler.release(context: context)
        }
    }

    /// The upstream's connection is above its high watermark: the client's messages wait until it
    /// drains (``upstreamDrained()``).
    private func holdClientWhileUpstreamIsFull(_ handler: EventLoopWebSocketHandler) {
        guard upstreamFull, !clientHeldForUpstream else { return }
        handler.hold()
        clientHeldForUpstream = true
    }

    /// A message the client sent before its close, which the handler did not hand over while
    /// the one before it was on its way: forwarded all the same, through the rules, after it.
    func discarded(_ message: ByteBuffer, opcode: WebSocketOpcode) {
        let scripted = ScriptedMessage(message, opcode: opcode)
        if clientMessageHeld {
            clientBacklog.append(scripted)
        } else {
            _ = takeFromClient(scripted)
        }
    }

    func peerClosed(code: WebSocketCloseCode?, reason: String) {
        tap?.closed(by: .client, code: code?.rawValue, reason: reason)
        journal?.append(
            .init(connection: connection, path: path, direction: .in, kind: .close, code: code.map { Int($0.rawValue) }, reason: reason, leg: .client)
        )
        guard !finished else { return }
        // The messages the client sent before its close go first, held back or not.
        if clientMessageHeld {
            clientClose = (code, reason)
        } else {
            passClientClose(code: code, reason: reason)
        }
    }

    /// The client's close goes to the upstream, with its code.
    private func passClientClose(code: WebSocketCloseCode?, reason: String) {
        guard !finished else { return }
        finished = true
        journal?.append(
            .init(
                connection: connection, path: path, direction: .out, kind: .close, code: code.map { Int($0.rawValue) }, reason: reason, leg: .upstream
            ))
        upstream.close(code: code ?? .normalClosure, reason: reason)
    }

    func pinged(_ payload: ByteBuffer) -> Bool {
        if !answersPings {
            journal?.append(
                .init(
                    connection: connection, path: path, direction: .in, kind: .ping, data: String(buffer: payload), leg: .client,
                    action: "pong withheld"))
        }
        return answersPings
    }

    func stall(for duration: Duration) {}

    func closing() {}

    func end() {
        // After a close, the tap's session has ended: this records nothing more.
        tap?.dropped(by: .client)
        let closedWithoutFrame = !finished && clientClose == nil
        if closedWithoutFrame {
            // The client went without a close frame: the upstream goes too.
            finished = true
            journal?.append(.init(connection: connection, path: path, direction: .in, kind: .drop, leg: .client))
        }
        handler = nil
        context = nil
        for held in heldMessages { held.settle(.connectionEnded) }
        // A client gone without a close frame takes the upstream's connection the same way; after
        // a close, the upstream's close handshake is under way and ends by itself (or at its
        // close timeout). Its reply is read: nothing waits for the client's channel any more.
        if closedWithoutFrame { upstream.abort() }
        readUpstreamIfReady()
    }
}

extension ScriptedMessage {
    /// A message as the client's handler hands it over.
    fileprivate init(_ buffer: ByteBuffer, opcode: WebSocketOpcode) {
        self = opcode == .text ? .text(String(buffer: buffer)) : .binary(Data(buffer.readableBytesView))
    }
}
