import DuplexSchema
import Testing

@testable import Duplex

/// The one lifecycle every client runs, with no I/O: connecting, reconnecting, disconnecting,
/// terminating and the send queue under ``WebSocket``'s policy, then what the other policies
/// change (``ChatClient``'s, ``ReconnectingWebSocket``'s, the SSE client's).
@Suite("ConnectionLifecycle")
struct ConnectionLifecycleTests {
    typealias Lifecycle = ConnectionLifecycle<WebSocketPolicy>
    typealias Action = Lifecycle.Action

    func lifecycle(_ strategy: ReconnectionStrategy = .fixedDelay(.seconds(1)), queue: Int = 3) -> Lifecycle {
        Lifecycle(policy: WebSocketPolicy(strategy: strategy, maxQueued: queue))
    }

    /// Connects generation 1 and returns the lifecycle connected.
    func connected(_ machine: Lifecycle) -> Lifecycle {
        var machine = machine
        _ = machine.connect()
        _ = machine.connectSucceeded(generation: 1)
        return machine
    }

    func connected(_ strategy: ReconnectionStrategy = .fixedDelay(.seconds(1)), queue: Int = 3) -> Lifecycle {
        connected(lifecycle(strategy, queue: queue))
    }

    func closed(_ code: WebSocketCloseCode?, _ reason: String = "", error: WebSocketError? = nil) -> WebSocketLoss {
        .closed(code: code, reason: reason, error: error)
    }

    func schedules(_ actions: [Action]) -> Bool {
        actions.contains { if case .scheduleRetry = $0 { true } else { false } }
    }

    @Test("connect starts an attempt; success publishes connected, reports the opening, starts pinging, then delivers what was held")
    func connect() {
        var machine = lifecycle()
        #expect(machine.status == .notConnected)
        #expect(machine.connect() == .wait([.publish(.connecting), .startConnecting(generation: 1)]))
        #expect(machine.connect() == .wait([]), "a second connect waits for the same attempt")
        #expect(machine.received(generation: 1) == .holdBack, "what arrives before the opening is processed waits for it")
        let actions = machine.connectSucceeded(generation: 1)
        #expect(actions == [.publish(.connected), .opened(generation: 1), .startPinging, .resumeConnectWaiters(nil), .deliverHeld(generation: 1)])
        #expect(machine.connect() == .alreadyConnected)
        #expect(machine.received(generation: 1) == .deliver)
        #expect(machine.received(generation: 0) == .drop, "an older connection's message is dropped")
    }

    @Test("a failed first attempt is reported and not retried")
    func initialFailure() {
        var machine = lifecycle()
        _ = machine.connect()
        let error = WebSocketError(.connectionFailed, "refused")
        let actions = machine.connectFailed(generation: 1, loss: .failed(error))
        #expect(actions.contains(.resumeConnectWaiters(.failed(.failed(error)))))
        #expect(actions.contains(.attemptFailed(.failed(error), willRetry: false)))
        #expect(!schedules(actions))
        #expect(machine.phase == .ended(.lost(.failed(error))))
    }

    @Test("a first attempt refused with 429 or 503 and Retry-After waits that long and tries again within the strategy; connect() keeps waiting")
    func initialThrottle() {
        var machine = lifecycle(.exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(10), maxAttempts: 2))
        _ = machine.connect()
        let busy = WebSocketError(.upgradeRejected, "429", status: 429, retryAfter: .seconds(2))
        let first = machine.connectFailed(generation: 1, loss: .failed(busy))
        #expect(first.contains(.scheduleRetry(attempt: 0, delay: .seconds(2))), "the server's wait, not the strategy's")
        #expect(first.contains(.attemptFailed(.failed(busy), willRetry: true)))
        #expect(!first.contains { if case .resumeConnectWaiters = $0 { true } else { false } }, "connect() is still waiting")
        #expect(machine.retryTimerFired(attempt: 0) == [.publish(.connecting), .startConnecting(generation: 2)])
        #expect(machine.connectSucceeded(generation: 2).contains(.resumeConnectWaiters(nil)))

        var without = lifecycle(.none)
        _ = without.connect()
        let refused = without.connectFailed(generation: 1, loss: .failed(busy))
        #expect(refused.contains(.resumeConnectWaiters(.failed(.failed(busy)))), "no strategy: connect() fails with the status and the wait")
        #expect(!schedules(refused))

        var noWait = lifecycle()
        _ = noWait.connect()
        let plain = WebSocketError(.upgradeRejected, "429", status: 429)
        #expect(!schedules(noWait.connectFailed(generation: 1, loss: .failed(plain))), "a 429 without Retry-After is an answer, not a wait")
    }

    @Test("disconnect closes and waits; calling it again, or when disconnected, does nothing")
    func disconnect() {
        var machine = connected()
        #expect(
            machine.disconnect(code: .normalClosure, reason: "bye") == .wait([.stopPinging, .closeConnection(code: .normalClosure, reason: "bye")]))
        #expect(machine.disconnect(code: .normalClosure, reason: "again") == .wait([]))
        let loss = closed(.normalClosure, "bye")
        let done = machine.connectionLost(generation: 1, loss: loss)
        #expect(done == [.closedAsAsked(loss), .publish(.ended(.manual)), .resumeDisconnectWaiters])
        #expect(machine.disconnect(code: .normalClosure, reason: "") == .done)
        #expect(machine.connect() == .wait([.publish(.connecting), .startConnecting(generation: 2)]), "connect works again")
    }

    @Test("an abnormal closure schedules a reconnection with the strategy's delay; success resets the attempt count")
    func reconnectAfterDrop() {
        var machine = connected(.linearBackoff(step: .seconds(1), maxDelay: .seconds(10)))
        let actions = machine.connectionLost(generation: 1, loss: closed(nil))
        #expect(actions.contains(.scheduleRetry(attempt: 0, delay: .seconds(1))))
        #expect(actions.contains(.lost(closed(nil), willRetry: true)))
        #expect(machine.status == .reconnecting(after: closed(nil)))
        #expect(machine.retryTimerFired(attempt: 0) == [.publish(.connecting), .startConnecting(generation: 2)])
        let failed = machine.connectFailed(generation: 2, loss: .failed(WebSocketError(.connectionFailed, "refused")))
        #expect(failed.contains(.scheduleRetry(attempt: 1, delay: .seconds(2))))
        _ = machine.retryTimerFired(attempt: 1)
        _ = machine.connectSucceeded(generation: 3)
        let again = machine.connectionLost(generation: 3, loss: closed(.goingAway, "restart"))
        #expect(again.contains(.scheduleRetry(attempt: 0, delay: .seconds(1))), "the count starts over after a success")
    }

    @Test("a 1000 close from the peer is not reconnected; 1001 is, and so is a 1000 that came with an error")
    func peerCloseCodes() {
        var normal = connected()
        let actions = normal.connectionLost(generation: 1, loss: closed(.normalClosure))
        #expect(!schedules(actions))
        #expect(normal.phase == .ended(.lost(closed(.normalClosure))))
        var goingAway = connected()
        #expect(goingAway.connectionLost(generation: 1, loss: closed(.goingAway)).contains(.scheduleRetry(attempt: 0, delay: .seconds(1))))
        var failed = connected()
        let error = WebSocketError(.protocolViolation, "bad frame")
        #expect(schedules(failed.connectionLost(generation: 1, loss: closed(.normalClosure, error: error))))
    }

    @Test("reconnection gives up after maxAttempts and reports it")
    func givesUp() {
        var machine = connected(.fixedDelay(.milliseconds(10), maxAttempts: 2))
        _ = machine.connectionLost(generation: 1, loss: closed(nil))
        _ = machine.retryTimerFired(attempt: 0)
        _ = machine.connectFailed(generation: 2, loss: .failed(WebSocketError(.connectionFailed, "x")))
        _ = machine.retryTimerFired(attempt: 1)
        let last = machine.connectFailed(generation: 3, loss: .failed(WebSocketError(.connectionFailed, "x")))
        guard case .ended(let end) = machine.phase else {
            Issue.record("expected the lifecycle to end")
            return
        }
        #expect(end.reason == .reconnectionGaveUp(attempts: 2))
        #expect(last.contains(.publish(.ended(end))))
        #expect(last.contains(.attemptFailed(.failed(WebSocketError(.connectionFailed, "x")), willRetry: false)))
    }

    @Test("sends while reconnecting are queued, bounded, and flushed in order on the new connection")
    func sendQueue() {
        var machine = connected(queue: 2)
        #expect(machine.send(.string("now")) == .write(generation: 1))
        _ = machine.connectionLost(generation: 1, loss: closed(nil))
        #expect(machine.send(.string("a")) == .queued)
        #expect(machine.send(.string("b")) == .queued)
        #expect(machine.send(.string("c")) == .queueFull)
        _ = machine.retryTimerFired(attempt: 0)
        let actions = machine.connectSucceeded(generation: 2)
        #expect(actions.contains(.flush([.string("a"), .string("b")])))
        #expect(machine.queuedCount == 0)
    }

    @Test("queued sends are never dropped silently: giving up or disconnecting reports them")
    func droppedQueueIsReported() {
        var machine = connected()
        _ = machine.connectionLost(generation: 1, loss: closed(nil))
        _ = machine.send(.string("pending"))
        guard case .immediate(let actions) = machine.disconnect(code: .normalClosure, reason: "") else {
            Issue.record("disconnect while waiting is immediate")
            return
        }
        #expect(actions.contains(.cancelRetryTimer))
        #expect(actions.contains(.dropQueued(count: 1, because: "disconnect() was called")))
        #expect(machine.phase == .ended(.manual))
        var givingUp = connected(.fixedDelay(.milliseconds(10), maxAttempts: 1))
        _ = givingUp.connectionLost(generation: 1, loss: closed(nil))
        _ = givingUp.send(.string("pending"))
        _ = givingUp.retryTimerFired(attempt: 0)
        let last = givingUp.connectFailed(generation: 2, loss: .failed(WebSocketError(.connectionFailed, "x")))
        #expect(last.contains(.dropQueued(count: 1, because: "reconnection gave up")))
    }

    @Test("send when never connected or disconnected is refused; after terminate, terminated")
    func sendWhenClosed() {
        var machine = lifecycle()
        #expect(machine.send(.string("x")) == .notConnected)
        _ = machine.terminate()
        #expect(machine.send(.string("x")) == .terminated)
    }

    @Test("terminate during a backoff cancels the timer, finishes the streams, and nothing restarts")
    func terminateDuringBackoff() {
        var machine = connected()
        _ = machine.connectionLost(generation: 1, loss: closed(nil))
        let actions = machine.terminate()
        #expect(actions.contains(.cancelRetryTimer))
        #expect(actions.last == .finish)
        #expect(machine.retryTimerFired(attempt: 0) == [], "a timer that fires anyway does nothing")
        #expect(machine.terminate() == [], "terminate twice does nothing")
        #expect(machine.connect() == .fail(.terminated))
    }

    @Test("disconnect or terminate while connecting cancels the attempt and fails connect")
    func stopWhileConnecting() {
        var machine = lifecycle()
        _ = machine.connect()
        guard case .immediate(let actions) = machine.disconnect(code: .normalClosure, reason: "") else {
            Issue.record("disconnect while connecting is immediate")
            return
        }
        #expect(actions.prefix(2) == [.cancelAttempt, .resumeConnectWaiters(.disconnected)])
        var terminated = lifecycle()
        _ = terminated.connect()
        let ended = terminated.terminate()
        #expect(ended.contains(.cancelAttempt) && ended.contains(.resumeConnectWaiters(.terminated)))
    }

    @Test("disconnect during a backoff stops the retries")
    func disconnectDuringBackoff() {
        var machine = connected()
        _ = machine.connectionLost(generation: 1, loss: closed(nil))
        _ = machine.disconnect(code: .normalClosure, reason: "")
        #expect(machine.retryTimerFired(attempt: 0) == [])
        #expect(machine.phase == .ended(.manual))
    }

    @Test("a ping failure aborts the connection, reports it, and reconnects")
    func pingFailure() {
        var machine = connected()
        let actions = machine.connectionLost(generation: 1, loss: .pingFailed(missed: 3), abort: true)
        #expect(actions.prefix(3) == [.stopPinging, .abortConnection, .lost(.pingFailed(missed: 3), willRetry: true)])
        #expect(actions.contains(.publish(.reconnecting(after: .pingFailed(missed: 3)))))
        #expect(actions.contains(.scheduleRetry(attempt: 0, delay: .seconds(1))))
        #expect(machine.connectionLost(generation: 1, loss: closed(nil)) == [], "the aborted connection's late report is ignored")
    }

    @Test("a connection that opens after it stopped being wanted is discarded")
    func lateSuccess() {
        var machine = lifecycle()
        _ = machine.connect()
        _ = machine.disconnect(code: .normalClosure, reason: "")
        #expect(machine.connectSucceeded(generation: 1) == [.discardConnection(generation: 1)])
    }

    @Test("a close reported before the opening is processed right after it, once what came before it is delivered")
    func earlyClose() {
        var machine = lifecycle()
        _ = machine.connect()
        #expect(machine.connectionLost(generation: 1, loss: closed(.goingAway)) == [], "held until the opening")
        let actions = machine.connectSucceeded(generation: 1)
        let held = actions.firstIndex(of: .deliverHeld(generation: 1))
        let lost = actions.firstIndex(of: .lost(closed(.goingAway), willRetry: true))
        #expect(held != nil && lost != nil && held! < lost!)
        var failed = lifecycle()
        _ = failed.connect()
        _ = failed.connectionLost(generation: 1, loss: closed(.goingAway))
        _ = failed.connectFailed(generation: 1, loss: .failed(WebSocketError(.connectionFailed, "x")))
        _ = failed.connect()
        #expect(
            !failed.connectSucceeded(generation: 2).contains { if case .lost = $0 { true } else { false } },
            "a failed attempt's early close is forgotten")
    }

    // MARK: The other policies

    @Test("ChatClient's policy: a 1000 is retried; a 1008 or 1013 with a reason ends it before the welcome, not after")
    func chatPolicy() {
        let chat = ChatClientCore.policy(WebSocketConfiguration(reconnection: .fixedDelay(.seconds(1))))
        #expect(chat.retry(after: closed(.normalClosure), proved: true) == .policy())
        #expect(chat.retry(after: closed(.policyViolation, "bad_name"), proved: false) == .never)
        #expect(chat.retry(after: closed(.tryAgainLater, "room_full"), proved: false) == .never)
        #expect(chat.retry(after: closed(.tryAgainLater, "too far behind"), proved: true) == .policy())
        #expect(chat.retry(after: closed(.policyViolation), proved: false) == .policy(), "no reason: not a refusal")
        var machine = Lifecycle(policy: chat)
        _ = machine.connect()
        _ = machine.connectSucceeded(generation: 1)
        #expect(machine.attempts == 0)
        let refused = machine.connectionLost(generation: 1, loss: closed(.policyViolation, "bad_name"))
        #expect(refused.contains(.lost(closed(.policyViolation, "bad_name"), willRetry: false)))
        var welcomed = Lifecycle(policy: chat)
        _ = welcomed.connect()
        _ = welcomed.connectSucceeded(generation: 1)
        welcomed.proved(generation: 1)
        #expect(schedules(welcomed.connectionLost(generation: 1, loss: closed(.tryAgainLater, "too far behind"))))
    }

    @Test("a policy whose connection proves itself later backs off from a server that accepts and drops")
    func provedLater() {
        var machine = Lifecycle(
            policy: WebSocketPolicy(strategy: .linearBackoff(step: .seconds(1), maxDelay: .seconds(10)), maxQueued: 0, provedOnOpen: false)
        )
        _ = machine.connect()
        _ = machine.connectSucceeded(generation: 1)
        _ = machine.connectionLost(generation: 1, loss: closed(nil))
        _ = machine.retryTimerFired(attempt: 0)
        _ = machine.connectSucceeded(generation: 2)
        #expect(machine.connectionLost(generation: 2, loss: closed(nil)).contains(.scheduleRetry(attempt: 1, delay: .seconds(2))))
        _ = machine.retryTimerFired(attempt: 1)
        _ = machine.connectSucceeded(generation: 3)
        machine.proved(generation: 3)
        #expect(machine.connectionLost(generation: 3, loss: closed(nil)).contains(.scheduleRetry(attempt: 0, delay: .seconds(1))))
    }

    @Test("a WebSocket upgrade refused with 429 or 503 and Retry-After is retried after it; other refusals after the strategy's delay")
    func upgradeRetryAfter() {
        let policy = WebSocketPolicy(strategy: .fixedDelay(.seconds(1)), maxQueued: 0)
        let busy = WebSocketError(.upgradeRejected, "429", status: 429, retryAfter: .seconds(7))
        #expect(policy.retry(after: .failed(busy), proved: false) == .after(.seconds(7)))
        let down = WebSocketError(.upgradeRejected, "503", status: 503, retryAfter: .seconds(2))
        #expect(policy.retry(after: .failed(down), proved: false) == .after(.seconds(2)))
        let forbidden = WebSocketError(.upgradeRejected, "403", status: 403, retryAfter: .seconds(7))
        #expect(policy.retry(after: .failed(forbidden), proved: false) == .policy())
        #expect(policy.retry(after: .failed(WebSocketError(.upgradeRejected, "429", status: 429)), proved: false) == .policy())
    }

    @Test("a policy whose connect() waits through failures retries the first attempt, and fails connect only when it gives up")
    func connectRetries() {
        var machine = Lifecycle(
            policy: WebSocketPolicy(
                strategy: .fixedDelay(.seconds(1), maxAttempts: 1), maxQueued: 1, connectRetries: true, retriesNormalClosure: true)
        )
        _ = machine.connect()
        #expect(machine.send(.string("early")) == .queued, "queued before the first connection too")
        let error = WebSocketError(.connectionFailed, "refused")
        let first = machine.connectFailed(generation: 1, loss: .failed(error))
        #expect(first.contains(.scheduleRetry(attempt: 0, delay: .seconds(1))))
        #expect(!first.contains { if case .resumeConnectWaiters = $0 { true } else { false } })
        _ = machine.retryTimerFired(attempt: 0)
        let last = machine.connectFailed(generation: 2, loss: .failed(error))
        #expect(last.contains(.resumeConnectWaiters(.gaveUp(attempts: 1, last: .failed(error)))))
        #expect(last.contains(.dropQueued(count: 1, because: "reconnection gave up")))
    }

    @Test("the SSE policy: connect waits through failures, a final answer (204) ends it, Retry-After and retry: set the delay, events prove a stream")
    func ssePolicy() {
        typealias SSE = ConnectionLifecycle<SSEPolicy>
        let steady = ReconnectionStrategy(initialDelay: .seconds(1), maxDelay: .seconds(60), backoffMultiplier: 1, jitter: 0)
        var machine = SSE(policy: SSEPolicy(strategy: steady))
        _ = machine.connect()
        let refused = SSELoss(reason: .streamError(SSEError(.connectionFailed, "refused")), retry: .policy())
        let first = machine.connectFailed(generation: 1, loss: refused)
        #expect(first.contains(.scheduleRetry(attempt: 0, delay: .seconds(1))), "the first attempt is retried")
        #expect(machine.status.state == .disconnected(refused.reason))
        _ = machine.retryTimerFired(attempt: 0)
        let busy = SSELoss(reason: .streamError(SSEError(.badStatus, "503", status: 503)), retry: .after(.seconds(7)))
        #expect(
            machine.connectFailed(generation: 2, loss: busy).contains(.scheduleRetry(attempt: 1, delay: .seconds(7))),
            "Retry-After overrides the delay")
        _ = machine.retryTimerFired(attempt: 1)
        _ = machine.connectSucceeded(generation: 3)
        let ended = SSELoss(reason: .streamEnded, retry: .policy(suggested: .seconds(3)))
        let silent = machine.connectionLost(generation: 3, loss: ended)
        #expect(
            silent.contains(.scheduleRetry(attempt: 2, delay: .seconds(3))),
            "a stream that delivered nothing proved nothing; the server's retry: is the delay")
        _ = machine.retryTimerFired(attempt: 2)
        _ = machine.connectSucceeded(generation: 4)
        machine.proved(generation: 4)
        #expect(
            machine.connectionLost(generation: 4, loss: ended).contains(.scheduleRetry(attempt: 0, delay: .seconds(3))),
            "events proved it: the count starts over")
        _ = machine.retryTimerFired(attempt: 0)
        let noContent = SSELoss(reason: .streamError(SSEError(.noContent, "204", status: 204)), retry: .never)
        let final = machine.connectFailed(generation: 5, loss: noContent)
        #expect(final.contains(.resumeConnectWaiters(.failed(noContent))))
        #expect(machine.status.state == .disconnected(noContent.reason))
        #expect(SSE.Failure.failed(noContent).error(retryPolicy: .init()).code == .noContent)
        #expect(SSE.Failure.gaveUp(attempts: 3, last: refused).error(retryPolicy: .init()).code == .retriesExhausted)
    }

    @Test("a final loss (an SSE stream that finished, a request that is not resumable) finishes the streams, and connect() is refused with it")
    func finalLoss() {
        typealias SSE = ConnectionLifecycle<SSEPolicy>
        let steady = ReconnectionStrategy(initialDelay: .seconds(1), maxDelay: .seconds(60), backoffMultiplier: 1, jitter: 0)
        var feed = SSE(policy: SSEPolicy(strategy: steady))
        _ = feed.connect()
        _ = feed.connectSucceeded(generation: 1)
        let ended = SSELoss(reason: .streamEnded, retry: .policy())
        #expect(feed.connectionLost(generation: 1, loss: ended).contains(.scheduleRetry(attempt: 0, delay: .seconds(1))), "a feed's end is retried")
        _ = feed.retryTimerFired(attempt: 0)
        _ = feed.connectSucceeded(generation: 2)
        let finished = feed.connectionLost(generation: 2, loss: .finish)
        #expect(finished.last == .finish, "a finish ends every stream, after the state is published")
        #expect(!finished.contains { if case .scheduleRetry = $0 { true } else { false } })
        #expect(feed.connect() == .fail(.failed(.finish)))
        #expect(SSE.Failure.failed(.finish).error(retryPolicy: .init()).code == .finished)

        var oneShot = SSE(policy: SSEPolicy(strategy: steady, resumable: false))
        _ = oneShot.connect()
        let refused = SSELoss(reason: .streamError(SSEError(.connectionFailed, "refused")), retry: .policy())
        #expect(!oneShot.connectFailed(generation: 1, loss: refused).contains(.finish), "a failure before any answer is retried, not final")
        _ = oneShot.retryTimerFired(attempt: 0)
        _ = oneShot.connectSucceeded(generation: 2)
        let dropped = SSELoss(reason: .streamError(SSEError(.connectionFailed, "dropped")), retry: .never)
        #expect(oneShot.connectionLost(generation: 2, loss: dropped).last == .finish)
        #expect(oneShot.connect() == .fail(.failed(dropped)))

        var manual = SSE(policy: SSEPolicy(strategy: steady, resumable: false))
        _ = manual.connect()
        _ = manual.connectSucceeded(generation: 1)
        _ = manual.disconnect(code: .normalClosure, reason: "")
        #expect(!manual.connectionLost(generation: 1, loss: ended).contains(.finish), "disconnect() is never final")
        #expect(manual.connect() == .wait([.publish(.connecting), .startConnecting(generation: 2)]))
    }

    @Test(
        "a network change: an open connection is probed; a failed probe drops it and reconnects at once with the backoff reset; a waiting reconnection starts now"
    )
    func networkChanged() {
        let growing = ReconnectionStrategy(initialDelay: .seconds(1), maxDelay: .seconds(60), backoffMultiplier: 2, jitter: 0)
        var machine = connected(growing)
        #expect(machine.networkChanged() == .probe(generation: 1))
        let dead = WebSocketLoss.failed(WebSocketError(.pingFailed, "no pong"))
        let failed = machine.checkFailed(generation: 1, loss: dead)
        #expect(failed.contains(.abortConnection), "the half-open connection is dropped at once")
        #expect(!failed.contains { if case .scheduleRetry = $0 { true } else { false } }, "no backoff wait")
        #expect(failed.suffix(2) == [.publish(.connecting), .startConnecting(generation: 2)])
        #expect(machine.attempts == 0, "the backoff starts over")
        #expect(machine.checkFailed(generation: 1, loss: dead).isEmpty, "a late report for an old connection is ignored")
        #expect(machine.networkChanged() == .nothing, "connecting already")

        // Three failures in a row grow the backoff; a network change cuts the wait short and resets it.
        #expect(machine.connectFailed(generation: 2, loss: dead).contains(.scheduleRetry(attempt: 0, delay: .seconds(1))))
        _ = machine.retryTimerFired(attempt: 0)
        #expect(machine.connectFailed(generation: 3, loss: dead).contains(.scheduleRetry(attempt: 1, delay: .seconds(2))))
        guard case .reconnectNow(let actions) = machine.networkChanged() else {
            Issue.record("a waiting reconnection starts now")
            return
        }
        #expect(actions == [.cancelRetryTimer, .publish(.connecting), .startConnecting(generation: 4)])
        #expect(
            machine.connectFailed(generation: 4, loss: dead).contains(.scheduleRetry(attempt: 0, delay: .seconds(1))), "from the first delay again")

        var idle = lifecycle(growing)
        #expect(idle.networkChanged() == .nothing, "never connected: nothing to check")
    }

    @Test("connect() during a backoff starts the next attempt at once")
    func connectDuringBackoff() {
        var machine = connected()
        _ = machine.connectionLost(generation: 1, loss: closed(nil))
        #expect(machine.connect() == .wait([.cancelRetryTimer, .publish(.connecting), .startConnecting(generation: 2)]))
    }
}

@Suite("PingTracker and ReconnectionStrategy")
struct PingAndStrategyTests {
    @Test("each ping has a unique payload; the matching pong resets failures and gives the round trip")
    func pingTracker() {
        var tracker = PingTracker(maxFailures: 2, salt: 42)
        let start = Duration.seconds(30)
        let first = tracker.nextPing(at: start)
        #expect(tracker.pongTimeoutElapsed() == .missed(failures: 1))
        let second = tracker.nextPing(at: start)
        #expect(first != second)
        #expect(tracker.pongReceived(first, at: start) == nil, "a late pong for an earlier ping does not count")
        #expect(tracker.pongReceived(second, at: start + .milliseconds(5)) == .milliseconds(5))
        #expect(tracker.consecutiveFailures == 0)
        _ = tracker.nextPing(at: start)
        #expect(tracker.pongTimeoutElapsed() == .missed(failures: 1))
        _ = tracker.nextPing(at: start)
        #expect(tracker.pongTimeoutElapsed() == .failed(failures: 2))
    }

    @Test("strategies give the documented delays")
    func strategies() {
        let fixed = ReconnectionStrategy.fixedDelay(.seconds(5), maxAttempts: 2)
        #expect([0, 1, 2].map { fixed.delay(forAttempt: $0) } == [.seconds(5), .seconds(5), nil])
        let linear = ReconnectionStrategy.linearBackoff(step: .seconds(1), maxDelay: .seconds(3))
        #expect((0..<5).map { linear.delay(forAttempt: $0) } == [.seconds(1), .seconds(2), .seconds(3), .seconds(3), .seconds(3)])
        let exact = ReconnectionStrategy.exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(10), jitter: 0)
        #expect((0..<6).map { exact.delay(forAttempt: $0) } == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(10), .seconds(10)])
        let jittered = ReconnectionStrategy.exponentialBackoff(baseDelay: .seconds(1), maxDelay: .seconds(10), maxAttempts: 3, jitter: 0.2)
        for attempt in 0..<3 {
            let delay = jittered.delay(forAttempt: attempt)!
            let base = Duration.seconds(1 << attempt)
            #expect(delay >= base * 0.8 && delay <= base * 1.2)
        }
        #expect(jittered.delay(forAttempt: 3) == nil)
        #expect(ReconnectionStrategy.none.delay(forAttempt: 0) == nil)
        let custom = ReconnectionStrategy(maxAttempts: 5) { $0 == 0 ? .milliseconds(100) : .seconds(2) }
        #expect(custom.delay(forAttempt: 0) == .milliseconds(100) && custom.delay(forAttempt: 4) == .seconds(2) && custom.delay(forAttempt: 5) == nil)
    }
}
