/// Why an event stream ended, or an attempt failed, and whether the answer allows another.
struct SSELoss: Equatable, Sendable {
    /// What ``SSEState/disconnected(_:)`` says of it.
    var reason: SSEDisconnectReason
    /// What the server's answer allows: never after a 204, a client error or a TLS failure; the
    /// policy's delay (or the server's `retry:`), or the server's `Retry-After`.
    var retry: Retry
    /// The stream finished: its terminal event arrived, or the answer to a request that is not
    /// resumable ended cleanly. Never retried.
    var finished = false

    /// The stream finished.
    static let finish = SSELoss(reason: .streamEnded, retry: .never, finished: true)
}

/// The lifecycle policy of a ``ServerSentEventManager``: `connect()` waits through failed
/// attempts (an event stream is expected to reconnect), a stream proves itself only once an
/// event arrived (a server that accepts and closes at once is backed off from), and nothing is
/// sent, so nothing is queued. A stream that finished is over for good; so is a request that is
/// not resumable, once it ended other than by `disconnect()`: its streams finish, and `connect()`
/// does not send it again.
struct SSEPolicy: LifecyclePolicy {
    typealias Loss = SSELoss
    typealias Outgoing = Never

    var strategy: ReconnectionStrategy
    /// ``SSERequest/isResumable``.
    var resumable = true
    var maxQueued: Int { 0 }
    var connectRetries: Bool { true }
    var provedOnOpen: Bool { false }

    func retry(after loss: SSELoss, proved: Bool) -> Retry { loss.retry }

    func isFinal(_ loss: SSELoss) -> Bool { loss.finished || !resumable }

    /// The error's code; `streamEnded` when the server ended the stream.
    static func metricsCause(of loss: SSELoss) -> String {
        switch loss.reason {
        case .streamError(let error): error.code.description
        case .streamEnded: loss.finished ? "finished" : "streamEnded"
        case .manuallyDisconnected: "manuallyDisconnected"
        case .terminated: "terminated"
        }
    }
}

extension ConnectionLifecycle.Status where Policy == SSEPolicy {
    /// The public state for this status: between attempts, disconnected with the last reason.
    var state: SSEState {
        switch self {
        case .notConnected: .notConnected
        case .connecting: .connecting
        case .connected: .connected
        case .reconnecting(let loss): .disconnected(loss.reason)
        case .ended(.manual): .disconnected(.manuallyDisconnected)
        case .ended(.lost(let loss)), .ended(.gaveUp(_, let loss)): .disconnected(loss.reason)
        case .terminated: .disconnected(.terminated)
        }
    }
}

extension ConnectionLifecycle.Failure where Policy == SSEPolicy {
    /// What a waiting `connect()` throws.
    func error(retryPolicy: RetryPolicy) -> SSEError {
        switch self {
        case .disconnected: SSEError(.disconnected, "disconnect() was called")
        case .terminated: SSEError(.terminated, "terminate() was called")
        case .failed(let loss):
            if case .streamError(let error) = loss.reason {
                error
            } else if loss.finished {
                SSEError(.finished, "the stream finished; a new ServerSentEventManager sends the request again")
            } else {
                SSEError(.connectionFailed, "the stream ended: \(loss.reason)")
            }
        case .gaveUp(let attempts, let loss):
            SSEError(
                .retriesExhausted,
                (retryPolicy.enabled ? "gave up after \(attempts) reconnection attempts" : "retries are disabled")
                    + "; the last attempt: \(loss.reason)"
            )
        }
    }
}
