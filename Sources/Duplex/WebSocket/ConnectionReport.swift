import DuplexSchema

/// What a client built on a ``WebSocket`` (``ChatClient``) hears of it, in one ordered stream:
/// each message with the connection that carried it, and each loss with whether the socket
/// reconnects. One stream, so a loss is never seen before the messages that came before it.
package enum ConnectionReport: Sendable, Equatable {
    /// A message, and the generation of the connection that carried it (to answer on the same
    /// connection with ``WebSocket/write(_:onConnection:)``).
    case message(WebSocketMessage, connection: UInt64)
    /// The connection of `connection` opened.
    case opened(connection: UInt64)
    /// The connection was lost or ended, or an attempt failed for good; `reconnecting` says
    /// whether the socket tries again.
    case disconnected(WebSocketDisconnectReason, reconnecting: Bool)
}
