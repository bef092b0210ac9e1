public import Foundation

/// A new connection, as a ``WebSocket/preamble`` sees it: an app's own handshake (auth, a
/// `hello`, resubscribing) runs here on every connection, the first and each reconnection,
/// before the sends queued while reconnecting go out and before the socket reports itself
/// connected.
///
/// What the preamble sends goes out first on the connection; what it receives with
/// ``receive(timeout:)`` is taken before the socket's streams see it (the server's answer to the
/// handshake), and everything it does not take is delivered to them once the preamble is done.
///
/// ```swift
/// socket.preamble = { connection in
///     try connection.sendJSON(Auth(token: token()))
///     let reply = try await connection.receive(timeout: .seconds(5))
///     guard reply.text == #"{"type":"ok"}"# else { throw AuthRefused() }
/// }
/// ```
public struct WebSocketPreamble: Sendable {
    let core: WebSocketCore
    let generation: UInt64
    let connection: any WebSocketTransportConnection

    /// The subprotocol the server chose for this connection, if any.
    public var negotiatedProtocol: String? { connection.negotiatedProtocol }

    /// Sends a message on this connection, ahead of anything queued.
    public func send(_ message: WebSocketMessage) {
        _ = connection.write(message)
    }

    /// Sends a text message on this connection, ahead of anything queued.
    public func send(_ text: String) {
        send(.string(text))
    }

    /// Sends a binary message on this connection, ahead of anything queued.
    public func send(_ data: Data) {
        send(.data(data))
    }

    /// Sends `value` encoded as a JSON text message, ahead of anything queued.
    /// - Throws: what `encoder` throws.
    public func sendJSON(_ value: some Encodable, encoder: JSONEncoder = JSONEncoder()) throws {
        send(.string(String(decoding: try encoder.encode(value), as: UTF8.self)))
    }

    /// The next message the server sends on this connection, taken from what the socket's
    /// streams will see.
    /// - Throws: ``WebSocketError``: ``WebSocketError/Code/preambleFailed`` when none came
    ///   within `timeout`, or the connection closed first.
    public func receive(timeout: Duration = .seconds(10)) async throws -> WebSocketMessage {
        try await core.preambleReceive(generation: generation, timeout: timeout)
    }
}
