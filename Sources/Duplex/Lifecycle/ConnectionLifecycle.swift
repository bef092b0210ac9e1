import DuplexSchema

/// The life of a client's live connection, decided in one place for every client: connecting,
/// delivering or holding back what arrives, losing the connection (a close, an error, missed
/// pings), reconnecting with the strategy's delays, giving up, disconnecting and terminating,
/// and the queue of sends made while no connection is open.
///
/// A pure value: every input returns the actions for its owner to perform, and it is unit-tested
/// without I/O. What differs between ``WebSocket``, ``ReconnectingWebSocket``,
/// ``ServerSentEventManager`` and ``ChatClient`` is their ``LifecyclePolicy``: which losses are
/// retried, whether `connect()` waits through failed attempts, when a connection proves itself.
/// Each attempt has a generation number, so a late report from an abandoned connection is
/// ignored.
struct ConnectionLifecycle<Policy: LifecyclePolicy> {
    typealias Loss = Policy.Loss
    typealias Outgoing = Policy.Outgoing

    /// Why the lifecycle stopped for now (``Phase/ended(_:)``).
    enum End: Equatable, Sendable {
        /// `disconnect()` was called.
        case manual
        /// The connection was lost, or the first attempt failed, and the policy does not retry it.
        case lost(Loss)
        /// The strategy gave up after `attempts` attempts in a row; `last` is the last loss.
        case gaveUp(attempts: Int, last: Loss)
    }

    enum Phase: Equatable, Sendable {
        case idle
        /// An attempt is under way. `retrying`: its failure is retried, not reported to
        /// `connect()` (a reconnection, or a policy whose `connect()` waits through failures).
        case connecting(generation: UInt64, retrying: Bool)
        case connected(generation: UInt64)
        /// `disconnect()` asked the open connection to close.
        case disconnecting(generation: UInt64)
        /// Lost `after`; the next attempt, number `attempt`, starts when the timer fires.
        case waiting(attempt: Int, after: Loss)
        case ended(End)
        case terminated
    }

    /// Why `connect()` failed.
    enum Failure: Equatable, Sendable {
        /// `disconnect()` was called before a connection opened.
        case disconnected
        case terminated
        /// The attempt failed, or the connection was lost before it was reported open, and the
        /// policy does not retry it.
        case failed(Loss)
        /// The strategy gave up.
        case gaveUp(attempts: Int, last: Loss)
    }

    enum Action: Equatable, Sendable {
        /// Open a connection for this generation.
        case startConnecting(generation: UInt64)
        /// The attempt under way is no longer wanted: stop it if you can (a late success is
        /// answered with ``discardConnection(generation:)`` all the same).
        case cancelAttempt
        /// Close the open connection gracefully.
        case closeConnection(code: WebSocketCloseCode, reason: String)
        /// Drop the open connection at once, with no close handshake.
        case abortConnection
        /// Close a connection that opened after it was no longer wanted.
        case discardConnection(generation: UInt64)
        /// Wait, then call ``retryTimerFired(attempt:)``.
        case scheduleRetry(attempt: Int, delay: Duration)
        case cancelRetryTimer
        /// Write these queued sends, in order, before anything else.
        case flush([Outgoing])
        /// Deliver what this generation received before its opening was processed, then go on.
        case deliverHeld(generation: UInt64)
        case startPinging
        case stopPinging
        /// The connection of this generation opened.
        case opened(generation: UInt64)
        /// An attempt failed; `willRetry` says whether another follows.
        case attemptFailed(Loss, willRetry: Bool)
        /// The open connection was lost; `willRetry` says whether a reconnection follows.
        case lost(Loss, willRetry: Bool)
        /// The connection closed after `disconnect()` asked it to.
        case closedAsAsked(Loss)
        /// Publish this status.
        case publish(Status)
        /// Resume everyone waiting in `connect()`: with success when nil, else this failure.
        case resumeConnectWaiters(Failure?)
        case resumeDisconnectWaiters
        /// Queued sends that will not be sent: report them, never drop them silently.
        case dropQueued(count: Int, because: String)
        /// Finish every stream: terminated, or ended by a loss the policy calls final.
        case finish
    }

    /// What a client shows of the phase.
    enum Status: Equatable, Sendable {
        case notConnected
        case connecting
        case connected
        /// Lost; a reconnection follows.
        case reconnecting(after: Loss)
        case ended(End)
        case terminated
    }

    private(set) var phase: Phase = .idle
    let policy: Policy
    private var generation: UInt64 = 0
    private var queue: [Outgoing] = []
    private var schedule: ReconnectionSchedule
    /// A loss reported for the attempt under way before its opening was: processed right after.
    private var earlyLoss: (generation: UInt64, loss: Loss, abort: Bool)?
    /// The live connection proved itself (it opened, or ``proved(generation:)`` said so).
    private var liveProved = false

    init(policy: Policy) {
        self.policy = policy
        self.schedule = ReconnectionSchedule(strategy: policy.strategy)
    }

    var status: Status {
        switch phase {
        case .idle: .notConnected
        case .connecting: .connecting
        case .connected, .disconnecting: .connected
        case .waiting(_, let loss): .reconnecting(after: loss)
        case .ended(let end): .ended(end)
        case .terminated: .terminated
        }
    }

    /// The generation of the connection that is open or closing, if any.
    var liveGeneration: UInt64? {
        switch phase {
        case .connected(let generation), .disconnecting(let generation): generation
        default: nil
        }
    }

    /// The generation of the open connection, if one is open and not closing.
    var openGeneration: UInt64? {
        if case .connected(let generation) = phase { generation } else { nil }
    }

    var queuedCount: Int { queue.count }

    /// Attempts started since the last connection proved itself.
    var attempts: Int { schedule.attempts }

    // MARK: Requests

    enum ConnectDecision: Equatable {
        /// Already connected: return.
        case alreadyConnected
        /// Wait for the attempt under way (the actions start one if needed).
        case wait([Action])
        /// Refuse.
        case fail(Failure)
    }

    mutating func connect() -> ConnectDecision {
        switch phase {
        case .connected:
            return .alreadyConnected
        case .connecting:
            return .wait([])
        case .ended(.lost(let loss)) where policy.isFinal(loss), .ended(.gaveUp(_, let loss)) where policy.isFinal(loss):
            return .fail(.failed(loss))
        case .idle, .ended:
            schedule.connectionProved()
            return .wait(beginAttempt(retrying: policy.connectRetries))
        case .waiting:
            // Asked to connect now: the attempt need not wait for the timer.
            return .wait([.cancelRetryTimer] + beginAttempt(retrying: true))
        case .disconnecting:
            return .fail(.disconnected)
        case .terminated:
            return .fail(.terminated)
        }
    }

    enum DisconnectDecision: Equatable {
        /// Nothing to do: not connected.
        case done
        /// Wait for the close handshake (the actions start it if needed).
        case wait([Action])
        /// Done at once, after these actions.
        case immediate([Action])
    }

    mutating func disconnect(code: WebSocketCloseCode, reason: String) -> DisconnectDecision {
        switch phase {
        case .idle, .ended, .terminated:
            return .done
        case .disconnecting:
            return .wait([])
        case .connected(let generation):
            phase = .disconnecting(generation: generation)
            return .wait([.stopPinging, .closeConnection(code: code, reason: reason)])
        case .connecting:
            phase = .ended(.manual)
            earlyLoss = nil
            var actions: [Action] = [.cancelAttempt, .resumeConnectWaiters(.disconnected)]
            actions += dropQueue(because: "disconnect() was called")
            return .immediate(actions + [.publish(status)])
        case .waiting:
            phase = .ended(.manual)
            return .immediate([.cancelRetryTimer] + dropQueue(because: "disconnect() was called") + [.publish(status)])
        }
    }

    mutating func terminate() -> [Action] {
        let previous = phase
        guard previous != .terminated else { return [] }
        phase = .terminated
        earlyLoss = nil
        var actions: [Action] = [.stopPinging, .cancelRetryTimer]
        switch previous {
        case .connected, .disconnecting:
            actions.append(.closeConnection(code: .normalClosure, reason: "terminated"))
        case .connecting:
            actions.append(.cancelAttempt)
        default:
            break
        }
        actions.append(.resumeConnectWaiters(.terminated))
        actions.append(.resumeDisconnectWaiters)
        actions += dropQueue(because: "terminate() was called")
        actions += [.publish(.terminated), .finish]
        return actions
    }

    enum SendDecision: Equatable {
        /// Write it now on the open connection.
        case write(generation: UInt64)
        /// Queued, to be flushed once connected.
        case queued
        /// Refused: the queue is full.
        case queueFull
        /// Refused: no connection is open or coming.
        case notConnected
        case terminated
    }

    mutating func send(_ message: Outgoing) -> SendDecision {
        switch phase {
        case .connected(let generation):
            return .write(generation: generation)
        case .connecting, .waiting:
            guard queue.count < policy.maxQueued else { return .queueFull }
            queue.append(message)
            return .queued
        case .idle, .ended, .disconnecting:
            return .notConnected
        case .terminated:
            return .terminated
        }
    }

    enum Delivery: Equatable {
        /// Deliver it now.
        case deliver
        /// Hold it: its connection's opening is not processed yet (``Action/deliverHeld(generation:)``).
        case holdBack
        /// Drop it: its connection is no longer the live one.
        case drop
    }

    /// Something arrived on the connection of `generation`.
    func received(generation: UInt64) -> Delivery {
        switch phase {
        case .connected(let live) where live == generation, .disconnecting(let live) where live == generation:
            return .deliver
        case .connecting(let pending, _) where pending == generation:
            return .holdBack
        default:
            return .drop
        }
    }

    // MARK: Reports

    mutating func connectSucceeded(generation: UInt64) -> [Action] {
        guard case .connecting(let current, _) = phase, current == generation else {
            return [.discardConnection(generation: generation)]
        }
        phase = .connected(generation: generation)
        liveProved = policy.provedOnOpen
        if liveProved { schedule.connectionProved() }
        let queued = queue
        queue = []
        var actions: [Action] = [.publish(status), .opened(generation: generation)]
        if !queued.isEmpty { actions.append(.flush(queued)) }
        actions += [.startPinging, .resumeConnectWaiters(nil), .deliverHeld(generation: generation)]
        if let early = earlyLoss, early.generation == generation {
            earlyLoss = nil
            actions += connectionLost(generation: generation, loss: early.loss, abort: early.abort)
        }
        return actions
    }

    mutating func connectFailed(generation: UInt64, loss: Loss) -> [Action] {
        guard case .connecting(let current, let retrying) = phase, current == generation else { return [] }
        earlyLoss = nil
        let retry = policy.retry(after: loss, proved: false)
        // A wait the server imposed (a 429 or 503 with `Retry-After`) is honoured on a first
        // attempt too, within the strategy: the server asked to be tried again later.
        let imposed = if case .after = retry { true } else { false }
        if retrying || imposed, let next = nextAttempt(retry) {
            phase = .waiting(attempt: next.attempt, after: loss)
            return [.attemptFailed(loss, willRetry: true), .publish(status), .scheduleRetry(attempt: next.attempt, delay: next.delay)]
        }
        let end = ending(loss, retry: retrying ? retry : .never)
        phase = .ended(end)
        var actions: [Action] = [.attemptFailed(loss, willRetry: false)]
        actions += dropQueue(because: retrying ? dropCause(end) : "the connection could not be opened")
        actions += [.publish(status), .resumeConnectWaiters(failure(end))]
        return actions + finishing(end)
    }

    /// A connection that opened proved itself (SSE: an event arrived): the next loss starts the
    /// backoff over.
    mutating func proved(generation: UInt64) {
        guard liveGeneration == generation else { return }
        liveProved = true
        schedule.connectionProved()
    }

    /// The connection of `generation` ended with `loss`. `abort`: drop it now, with no close
    /// handshake (its pings went unanswered).
    mutating func connectionLost(generation: UInt64, loss: Loss, abort: Bool = false) -> [Action] {
        switch phase {
        case .disconnecting(let current) where current == generation:
            phase = .ended(.manual)
            return (abort ? [.abortConnection] : []) + [.closedAsAsked(loss), .publish(status), .resumeDisconnectWaiters]
        case .connected(let current) where current == generation:
            var actions: [Action] = [.stopPinging]
            if abort { actions.append(.abortConnection) }
            let retry = policy.retry(after: loss, proved: liveProved)
            if let next = nextAttempt(retry) {
                phase = .waiting(attempt: next.attempt, after: loss)
                return actions + [.lost(loss, willRetry: true), .publish(status), .scheduleRetry(attempt: next.attempt, delay: next.delay)]
            }
            let end = ending(loss, retry: retry)
            phase = .ended(end)
            return actions + [.lost(loss, willRetry: false)] + dropQueue(because: dropCause(end)) + [.publish(status)] + finishing(end)
        case .connecting(let pending, _) where pending == generation:
            // Reported before the opening was: kept until it is, or until the attempt fails.
            earlyLoss = (generation, loss, abort)
            return []
        default:
            return []
        }
    }

    /// What to do when the network path changed or the app resumed (``networkChanged()``).
    enum CheckDecision: Equatable {
        /// Check the open connection of this generation at once (a ping with a short deadline,
        /// or for SSE some bytes within it); report a failure with ``checkFailed(generation:loss:)``.
        case probe(generation: UInt64)
        /// The lifecycle was waiting to reconnect: it starts the attempt now, with the backoff
        /// reset (these actions).
        case reconnectNow([Action])
        /// Nothing to check: connecting already, or not connected at all.
        case nothing
    }

    /// The network path changed, or the app resumed: a connection that looked alive may be
    /// half-open, and a backoff grown against a dead network is stale.
    mutating func networkChanged() -> CheckDecision {
        switch phase {
        case .connected(let generation):
            return .probe(generation: generation)
        case .waiting:
            schedule.connectionProved()
            return .reconnectNow([.cancelRetryTimer] + beginAttempt(retrying: true))
        case .idle, .connecting, .disconnecting, .ended, .terminated:
            return .nothing
        }
    }

    /// The check of ``networkChanged()`` found the connection of `generation` dead: it is dropped
    /// at once, and when the policy retries the loss, the next attempt starts now, the backoff
    /// reset, rather than after the strategy's delay.
    mutating func checkFailed(generation: UInt64, loss: Loss) -> [Action] {
        guard case .connected(let live) = phase, live == generation else { return [] }
        var actions = connectionLost(generation: generation, loss: loss, abort: true)
        guard case .waiting = phase else { return actions }
        actions.removeAll { if case .scheduleRetry = $0 { true } else { false } }
        schedule.connectionProved()
        return actions + beginAttempt(retrying: true)
    }

    mutating func retryTimerFired(attempt: Int) -> [Action] {
        guard case .waiting(let waiting, _) = phase, waiting == attempt else { return [] }
        return beginAttempt(retrying: true)
    }

    // MARK: Helpers

    private mutating func beginAttempt(retrying: Bool) -> [Action] {
        generation += 1
        earlyLoss = nil
        phase = .connecting(generation: generation, retrying: retrying)
        return [.publish(.connecting), .startConnecting(generation: generation)]
    }

    /// The next attempt and its delay as `retry` says, counted; nil: no attempt follows.
    private mutating func nextAttempt(_ retry: Retry) -> (attempt: Int, delay: Duration)? {
        switch retry {
        case .never: nil
        case .policy(let suggested): schedule.nextAttempt(suggested: suggested)
        case .after(let imposed): schedule.nextAttempt(overriding: imposed)
        }
    }

    /// How the lifecycle ends after `loss` when no attempt follows.
    private func ending(_ loss: Loss, retry: Retry) -> End {
        retry == .never ? .lost(loss) : .gaveUp(attempts: schedule.attempts, last: loss)
    }

    /// ``Action/finish`` when `end` is final for the policy: the streams end with it.
    private func finishing(_ end: End) -> [Action] {
        switch end {
        case .lost(let loss) where policy.isFinal(loss), .gaveUp(_, let loss) where policy.isFinal(loss): [.finish]
        default: []
        }
    }

    private func failure(_ end: End) -> Failure {
        switch end {
        case .manual: .disconnected
        case .lost(let loss): .failed(loss)
        case .gaveUp(let attempts, let last): .gaveUp(attempts: attempts, last: last)
        }
    }

    private func dropCause(_ end: End) -> String {
        switch end {
        case .manual: "disconnect() was called"
        case .lost: "the connection was lost"
        case .gaveUp(let attempts, _): attempts > 0 ? "reconnection gave up" : "the connection was lost"
        }
    }

    /// Empties the queue, reporting what was not sent: a queued send is never dropped silently.
    private mutating func dropQueue(because why: String) -> [Action] {
        guard !queue.isEmpty else { return [] }
        let count = queue.count
        queue = []
        return [.dropQueued(count: count, because: why)]
    }
}
