public import DuplexSchema

/// What happens on a ``WebSocket``, in order: the `events` stream.
public enum WebSocketEvent: Sendable, Equatable {
    /// A connection opened, with the subprotocol the server chose, if any.
    case connected(protocol: String?)
    /// A message arrived.
    case message(WebSocketMessage)
    /// The connection closed: the close code and reason from the peer's close frame, or nil for
    /// both when none came (the connection dropped, or pings went unanswered: an ``error(_:)``
    /// event says which). `code ?? .abnormalClosure` gives RFC 6455's 1006 for that case.
    case disconnected(code: WebSocketCloseCode?, reason: String?)
    /// An error tore the connection down, or a connection attempt failed.
    case error(WebSocketError)
}

/// The state of a ``WebSocket``: the `state` property and the `stateEvents` stream.
///
/// Four states, so a `switch` over them stays exhaustive. There is no state of its own for the
/// close handshake: the socket stays `connected` until ``WebSocket/disconnect(code:reason:)``
/// returns. Compare with a ``Kind`` to ignore the details:
///
/// ```swift
/// if socket.state == .disconnected { … }     // whatever the reason
/// if case .disconnected(.pingFailed) = socket.state { … }
/// ```
public enum WebSocketState: Sendable, Equatable, CustomStringConvertible {
    /// Created, never connected.
    case notConnected
    /// Opening a connection (the first, or a reconnection).
    case connecting
    /// Open, with the subprotocol the server chose, if any.
    case connected(protocol: String?)
    /// Closed, and why. With automatic reconnection, `connecting` may follow.
    case disconnected(WebSocketDisconnectReason)

    public var description: String {
        switch self {
        case .notConnected: "notConnected"
        case .connecting: "connecting"
        case .connected(let proto): proto.map { "connected(\($0))" } ?? "connected"
        case .disconnected(let reason): "disconnected(\(reason))"
        }
    }
}

extension WebSocketState {
    /// A state without its details: what `state == .disconnected` compares.
    public enum Kind: Sendable, Hashable {
        /// ``WebSocketState/notConnected``.
        case notConnected
        /// ``WebSocketState/connecting``.
        case connecting
        /// ``WebSocketState/connected(protocol:)``, whatever the subprotocol.
        case connected
        /// ``WebSocketState/disconnected(_:)``, whatever the reason.
        case disconnected
    }

    /// This state without its details.
    public var kind: Kind {
        switch self {
        case .notConnected: .notConnected
        case .connecting: .connecting
        case .connected: .connected
        case .disconnected: .disconnected
        }
    }

    /// Whether `state` is of this kind: `socket.state == .disconnected`, whatever the reason.
    public static func == (state: WebSocketState, kind: Kind) -> Bool {
        state.kind == kind
    }

    /// Whether `state` is not of this kind.
    public static func != (state: WebSocketState, kind: Kind) -> Bool {
        state.kind != kind
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
