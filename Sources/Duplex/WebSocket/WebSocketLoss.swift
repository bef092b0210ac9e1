import DuplexSchema

/// Why a WebSocket connection ended, or an attempt failed: what ``WebSocketPolicy`` decides on.
enum WebSocketLoss: Equatable, Sendable {
    /// The connection closed: the peer's close code (nil: none came) and reason, and the error
    /// that ended it, if any.
    case closed(code: WebSocketCloseCode?, reason: String, error: WebSocketError?)
    /// `missed` pings in a row went unanswered.
    case pingFailed(missed: Int)
    /// An attempt failed.
    case failed(WebSocketError)

    /// What ``WebSocketState/disconnected(_:)`` says of it.
    var reason: WebSocketDisconnectReason {
        switch self {
        case .closed(let code, let reason, let error): error.map { .error($0) } ?? .closed(code: code ?? .abnormalClosure, reason: reason)
        case .pingFailed(let missed): .pingFailed(missedPings: missed)
        case .failed(let error): .error(error)
        }
    }

    /// The error it carries, if any.
    var error: WebSocketError? {
        switch self {
        case .closed(_, _, let error): error
        case .pingFailed(let missed): WebSocketError(.pingFailed, "\(missed) pings in a row went unanswered")
        case .failed(let error): error
        }
    }
}

/// Which WebSocket losses are retried: the lifecycle policy of ``WebSocket`` (and so of
/// ``ChatClient``, over its socket) and of ``ReconnectingWebSocket``.
struct WebSocketPolicy: LifecyclePolicy {
    typealias Loss = WebSocketLoss
    typealias Outgoing = WebSocketMessage

    var strategy: ReconnectionStrategy
    var maxQueued: Int
    var connectRetries = false
    var provedOnOpen = true
    /// A 1000 from the peer is retried. A plain ``WebSocket`` does not (the peer ended the
    /// conversation); ``ReconnectingWebSocket`` and ``ChatClient`` do (a server going down says
    /// 1000 too, and the Duplex chat server never ends a member with it).
    var retriesNormalClosure = false
    /// Close codes that end it for good when they come with a reason on a connection that had
    /// not proved itself: the chat server's refused join (1008, or 1013 at its room limit).
    var refusalCodes: Set<WebSocketCloseCode> = []

    func retry(after loss: WebSocketLoss, proved: Bool) -> Retry {
        if case .failed(let error) = loss, error.code == .upgradeRejected, [429, 503].contains(error.status), let wait = error.retryAfter {
            return .after(wait)
        }
        guard case .closed(let code, let reason, let error) = loss, error == nil, let code else { return .policy() }
        if code == .normalClosure, !retriesNormalClosure { return .never }
        if !proved, refusalCodes.contains(code), !reason.isEmpty { return .never }
        return .policy()
    }

    /// The error's code; `closed` for a close frame with no error, `pingFailed` for unanswered pings.
    static func metricsCause(of loss: WebSocketLoss) -> String {
        switch loss {
        case .pingFailed: "pingFailed"
        case .closed(_, _, nil): "closed"
        case .closed(_, _, let error?), .failed(let error): error.code.description
        }
    }
}

extension ConnectionLifecycle.End where Policy == WebSocketPolicy {
    /// What ``WebSocketState/disconnected(_:)`` says of it.
    var reason: WebSocketDisconnectReason {
        switch self {
        case .manual: .manuallyDisconnected
        case .lost(let loss): loss.reason
        case .gaveUp(let attempts, let last): attempts > 0 ? .reconnectionGaveUp(attempts: attempts) : last.reason
        }
    }
}

extension ConnectionLifecycle.Failure where Policy == WebSocketPolicy {
    /// What a waiting `connect()` throws.
    var error: WebSocketError {
        switch self {
        case .disconnected: WebSocketError(.notConnected, "disconnect() was called while connecting")
        case .terminated: WebSocketError(.terminated, "terminate() was called")
        case .failed(let loss), .gaveUp(_, let loss): loss.error ?? WebSocketError(.connectionLost, "the connection ended: \(loss.reason)")
        }
    }
}
