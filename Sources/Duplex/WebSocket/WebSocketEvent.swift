public import DuplexSchema

/// What happens on a ``WebSocket``, in order: the `events` stream.
public enum WebSocketEvent: Sendable, Equatable {
    /// A connection opened, with the subprotocol the server chose, if any.
    case connected(protocol: String?)
    /// A message arrived.
    case message(WebSocketMessage)
    /// The connection closed: the close code and reason from the peer's close frame, or
    /// 1006 (abnormal closure) with an empty reason when there was none.
    case disconnected(code: WebSocketCloseCode, reason: String)
    /// An error tore the connection down, or a connection attempt failed.
    case error(WebSocketError)
}

/// The state of a ``WebSocket``: the `state` property and the `stateEvents` stream.
public enum WebSocketState: Sendable, Equatable, CustomStringConvertible {
    /// Created, never connected.
    case notConnected
    /// Opening a connection (the first, or a reconnection).
    case connecting
    /// Open, with the subprotocol the server chose, if any.
    case connected(protocol: String?)
    /// Closing: the close handshake is under way.
    case disconnecting
    /// Closed, and why. With automatic reconnection, `connecting` may follow.
    case disconnected(WebSocketDisconnectReason)

    public var description: String {
        switch self {
        case .notConnected: "notConnected"
        case .connecting: "connecting"
        case .connected(let proto): proto.map { "connected(\($0))" } ?? "connected"
        case .disconnecting: "disconnecting"
        case .disconnected(let reason): "disconnected(\(reason))"
        }
    }
}

/// Why a ``WebSocket`` is disconnected.
public enum WebSocketDisconnectReason: Sendable, Equatable, CustomStringConvertible {
    /// ``WebSocket/disconnect(code:reason:)`` or ``WebSocket/stop()`` was called.
    case manuallyDisconnected
    /// ``WebSocket/terminate()`` was called (or the last reference was released).
    case terminated
    /// The peer closed the connection with this code and reason (1006 when it sent no close frame).
    case closed(code: WebSocketCloseCode, reason: String)
    /// `maxPingFailures` pings in a row went unanswered.
    case pingFailed(missedPings: Int)
    /// An error tore the connection down, or a connection attempt failed.
    case error(WebSocketError)
    /// Automatic reconnection gave up after this many attempts.
    case reconnectionGaveUp(attempts: Int)

    public var description: String {
        switch self {
        case .manuallyDisconnected: "manuallyDisconnected"
        case .terminated: "terminated"
        case .closed(let code, let reason): reason.isEmpty ? "closed(\(code))" : "closed(\(code), \(reason))"
        case .pingFailed(let missed): "pingFailed(\(missed) missed)"
        case .error(let error): "error(\(error))"
        case .reconnectionGaveUp(let attempts): "reconnectionGaveUp(after \(attempts))"
        }
    }
}
