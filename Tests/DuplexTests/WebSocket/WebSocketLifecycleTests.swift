import DuplexSchema
import Testing

@testable import Duplex

/// Connecting, reconnecting, disconnecting, terminating and the send queue, with no I/O.
@Suite("WebSocketLifecycle")
struct WebSocketLifecycleTests {
    func lifecycle(_ strategy: ReconnectionStrategy = .fixedDelay(.seconds(1)), queue: Int = 3) -> WebSocketLifecycle {
        WebSocketLifecycle(strategy: strategy, maxQueuedSends: queue)
    }

    /// Connects generation 1 and returns the lifecycle connected.
    func connected(_ strategy: ReconnectionStrategy = .fixedDelay(.seconds(1)), queue: Int = 3) -> WebSocketLifecycle {
        var machine = lifecycle(strategy, queue: queue)
        _ = machine.connect()
        _ = machine.connectSucceeded(generation: 1, protocol: "chat")
        return machine
    }

    @Test("connect starts an attempt; success publishes connected, emits the event and starts pinging")
    func connect() {
        var machine = lifecycle()
        #expect(machine.state == .notConnected)
        #expect(machine.connect() == .wait([.publishState(.connecting), .startConnecting(generation: 1)]))
        #expect(machine.connect() == .wait([]), "a second connect waits for the same attempt")
        let actions = machine.connectSucceeded(generation: 1, protocol: "chat")
        #expect(actions == [.publishState(.connected(protocol: "chat")), .emit(.connected(protocol: "chat")), .startPinging, .resumeConnectWaiters(nil)])
        #expect(machine.connect() == .alreadyConnected)
    }

    @Test("a failed first attempt is reported and not retried")
    func initialFailure() {
        var machine = lifecycle()
        _ = machine.connect()
        let error = WebSocketError(.connectionFailed, "refused")
        let actions = machine.connectFailed(generation: 1, error: error)
        #expect(actions.contains(.resumeConnectWaiters(error)))
        #expect(!actions.contains { if case .scheduleReconnect = $0 { return true } else { return false } })
        #expect(machine.state == .disconnected(.error(error)))
    }

    @Test("disconnect closes and waits; calling it again, or when disconnected, does nothing")
    func disconnect() {
        var machine = connected()
        #expect(machine.disconnect(code: .normalClosure, reason: "bye") == .wait([.stopPinging, .closeConnection(code: .normalClosure, reason: "bye")]))
        #expect(machine.disconnect(code: .normalClosure, reason: "again") == .wait([]))
        let closed = machine.connectionClosed(generation: 1, code: .normalClosure, reason: "bye", error: nil)
        #expect(closed == [.emit(.disconnected(code: .normalClosure, reason: "bye")), .publishState(.disconnected(.manuallyDisconnected)), .resumeDisconnectWaiters])
        #expect(machine.disconnect(code: .normalClosure, reason: "") == .done)
        #expect(machine.connect() == .wait([.publishState(.connecting), .startConnecting(generation: 2)]), "connect works again")
    }

    @Test("an abnormal closure schedules a reconnection with the strategy's delay; success resets the attempt count")
    func reconnectAfterDrop() {
        var machine = connected(.linearBackoff(step: .seconds(1), maxDelay: .seconds(10)))
        let actions = machine.connectionClosed(generation: 1, code: nil, reason: "", error: nil)
        #expect(actions.contains(.scheduleReconnect(attempt: 0, delay: .seconds(1))))
        #expect(actions.contains(.emit(.disconnected(code: nil, reason: nil))), "no close frame: no code, no reason")
        #expect(machine.state == .connecting)
        #expect(machine.reconnectTimerFired(attempt: 0) == [.publishState(.connecting), .startConnecting(generation: 2)])
        let failed = machine.connectFailed(generation: 2, error: WebSocketError(.connectionFailed, "refused"))
        #expect(failed.contains(.scheduleReconnect(attempt: 1, delay: .seconds(2))))
        _ = machine.reconnectTimerFired(attempt: 1)
        _ = machine.connectSucceeded(generation: 3, protocol: nil)
        let again = machine.connectionClosed(generation: 3, code: .goingAway, reason: "restart", error: nil)
        #expect(again.contains(.scheduleReconnect(attempt: 0, delay: .seconds(1))), "the count starts over after a success")
    }

    @Test("a 1000 close from the peer is not reconnected; 1001 is")
    func peerCloseCodes() {
        var normal = connected()
        let actions = normal.connectionClosed(generation: 1, code: .normalClosure, reason: "", error: nil)
        #expect(!actions.contains { if case .scheduleReconnect = $0 { return true } else { return false } })
        #expect(normal.state == .disconnected(.closed(code: .normalClosure, reason: "")))
        var goingAway = connected()
        #expect(goingAway.connectionClosed(generation: 1, code: .goingAway, reason: "", error: nil).contains(.scheduleReconnect(attempt: 0, delay: .seconds(1))))
    }

    @Test("reconnection gives up after maxAttempts and reports it")
    func givesUp() {
        var machine = connected(.fixedDelay(.milliseconds(10), maxAttempts: 2))
        _ = machine.connectionClosed(generation: 1, code: nil, reason: "", error: nil)
        _ = machine.reconnectTimerFired(attempt: 0)
        _ = machine.connectFailed(generation: 2, error: WebSocketError(.connectionFailed, "x"))
        _ = machine.reconnectTimerFired(attempt: 1)
        let last = machine.connectFailed(generation: 3, error: WebSocketError(.connectionFailed, "x"))
        #expect(machine.state == .disconnected(.reconnectionGaveUp(attempts: 2)))
        #expect(last.contains(.publishState(.disconnected(.reconnectionGaveUp(attempts: 2)))))
    }

    @Test("sends while reconnecting are queued, bounded, and flushed in order on the new connection")
    func sendQueue() {
        var machine = connected(queue: 2)
        #expect(machine.send(.string("now")) == .write)
        _ = machine.connectionClosed(generation: 1, code: nil, reason: "", error: nil)
        #expect(machine.send(.string("a")) == .queued)
        #expect(machine.send(.string("b")) == .queued)
        guard case .fail(let error) = machine.send(.string("c")) else {
            Issue.record("a full queue must refuse")
            return
        }
        #expect(error.code == .sendQueueFull)
        _ = machine.reconnectTimerFired(attempt: 0)
        let actions = machine.connectSucceeded(generation: 2, protocol: nil)
        #expect(actions.contains(.flush([.string("a"), .string("b")])))
        #expect(machine.queuedCount == 0)
    }

    @Test("queued sends are never dropped silently: giving up or disconnecting reports them")
    func droppedQueueIsReported() {
        var machine = connected()
        _ = machine.connectionClosed(generation: 1, code: nil, reason: "", error: nil)
        _ = machine.send(.string("pending"))
        guard case .immediate(let actions) = machine.disconnect(code: .normalClosure, reason: "") else {
            Issue.record("disconnect while waiting is immediate")
            return
        }
        #expect(actions.contains(.cancelReconnectTimer))
        #expect(
            actions.contains { action in
                if case .emit(.error(let error)) = action { return error.message.contains("1 queued message was not sent") }
                return false
            })
        #expect(machine.state == .disconnected(.manuallyDisconnected))
    }

    @Test("send when never connected or disconnected throws notConnected; after terminate, terminated")
    func sendWhenClosed() {
        var machine = lifecycle()
        guard case .fail(let error) = machine.send(.string("x")) else { Issue.record("expected failure"); return }
        #expect(error.code == .notConnected)
        _ = machine.terminate()
        guard case .fail(let terminated) = machine.send(.string("x")) else { Issue.record("expected failure"); return }
        #expect(terminated.code == .terminated)
    }

    @Test("terminate during a backoff cancels the timer, finishes the streams, and nothing restarts")
    func terminateDuringBackoff() {
        var machine = connected()
        _ = machine.connectionClosed(generation: 1, code: nil, reason: "", error: nil)
        let actions = machine.terminate()
        #expect(actions.contains(.cancelReconnectTimer))
        #expect(actions.last == .finishStreams)
        #expect(machine.reconnectTimerFired(attempt: 0) == [], "a timer that fires anyway does nothing")
        #expect(machine.terminate() == [], "terminate twice does nothing")
        guard case .fail(let error) = machine.connect() else { Issue.record("connect after terminate must fail"); return }
        #expect(error.code == .terminated)
    }

    @Test("disconnect during a backoff stops the retries")
    func disconnectDuringBackoff() {
        var machine = connected()
        _ = machine.connectionClosed(generation: 1, code: nil, reason: "", error: nil)
        _ = machine.disconnect(code: .normalClosure, reason: "")
        #expect(machine.reconnectTimerFired(attempt: 0) == [])
        #expect(machine.state == .disconnected(.manuallyDisconnected))
    }

    @Test("a ping failure aborts the connection, reports it, and reconnects")
    func pingFailure() {
        var machine = connected()
        let actions = machine.pingFailed(generation: 1, missed: 3)
        #expect(actions.prefix(3) == [.stopPinging, .abortConnection, .pingFailed(missed: 3)])
        #expect(actions.contains(.publishState(.disconnected(.pingFailed(missedPings: 3)))))
        #expect(actions.contains(.scheduleReconnect(attempt: 0, delay: .seconds(1))))
        #expect(machine.connectionClosed(generation: 1, code: nil, reason: "", error: nil) == [], "the aborted connection's late report is ignored")
    }

    @Test("a connection that opens after it stopped being wanted is discarded")
    func lateSuccess() {
        var machine = lifecycle()
        _ = machine.connect()
        _ = machine.disconnect(code: .normalClosure, reason: "")
        #expect(machine.connectSucceeded(generation: 1, protocol: nil) == [.discardConnection(generation: 1)])
    }
}

@Suite("PingTracker and ReconnectionStrategy")
struct PingAndStrategyTests {
    @Test("each ping has a unique payload; the matching pong resets failures and gives the round trip")
    func pingTracker() {
        var tracker = PingTracker(maxFailures: 2, salt: 42)
        let start = ContinuousClock.now
        let first = tracker.nextPing(at: start)
        #expect(tracker.pongTimeoutElapsed() == .missed(failures: 1))
        let second = tracker.nextPing(at: start)
        #expect(first != second)
        #expect(tracker.pongReceived(first, at: start) == nil, "a late pong for an earlier ping does not count")
        #expect(tracker.pongReceived(second, at: start.advanced(by: .milliseconds(5))) == .milliseconds(5))
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
