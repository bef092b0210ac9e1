import DuplexHost
public import DuplexSchema

/// Which live connections a fault applies to.
///
/// Routes are named `echo`, `chat` (WebSocket chat members), `events` (the tick stream) and
/// `chat-events` (room SSE streams).
public struct FaultScope: Sendable, Hashable {
    let value: ConnectionScope

    /// Every WebSocket connection and SSE stream.
    public static let all = FaultScope(value: .all)
    /// The connections of one route, by its name in the route table: `echo`, `chat`, `events`,
    /// `chat-events`, `metrics-live`, or a scripted route's path (`/feed/*`).
    public static func route(_ name: String) -> FaultScope { FaultScope(value: .route(name)) }
    /// The members and watchers of one chat room.
    public static func room(_ name: String) -> FaultScope { FaultScope(value: .room(name)) }
}

/// Faults act on the connections the server is serving at the moment of the call. A client's
/// handshake completes a moment before the server starts serving it, so a test should see one
/// message go through before it injects a fault.
extension DuplexServer {
    /// Drops the connections in `scope` abruptly: the TCP connection closes with no WebSocket
    /// close frame and no end of SSE stream, as when a network path dies. Over HTTP/2 the
    /// connection's stream is reset (RST_STREAM, CANCEL); the connection stays.
    /// - Returns: how many connections it reached.
    @discardableResult
    public func dropConnections(_ scope: FaultScope = .all) -> Int {
        host.dropConnections(scope.value)
    }

    /// Stalls the connections in `scope` for `duration`: the server stops reading them (so pings
    /// go unanswered) and stops writing to them, then carries on. It is in effect when this
    /// returns: what a WebSocket client sends after it, a ping included, is answered only once
    /// the stall ends.
    /// - Returns: how many connections it reached.
    @discardableResult
    public func stallConnections(_ scope: FaultScope = .all, for duration: Duration) -> Int {
        host.stallConnections(scope.value, for: duration)
    }

    /// The path to the clients of the connections in `scope` went dead, as when a phone moves
    /// from Wi-Fi to cellular: the server stops reading and writing them for good, and sends no
    /// close, while connections opened after are served. A client notices by its pings, or at
    /// once when told the network changed (`checkConnection(within:)`). As with
    /// ``stallConnections(_:for:)``, it is in effect when this returns. The connections end when
    /// the client gives up on them. For the faithful half-open fault, where even a close the
    /// server makes never arrives, put `FaultProxy`'s `.pathSwitch` in front.
    /// - Returns: how many connections it reached.
    @discardableResult
    public func switchPath(_ scope: FaultScope = .all) -> Int {
        host.switchPath(scope.value)
    }

    /// Ends the SSE streams in `scope` cleanly, as a server that finished a response would.
    /// - Returns: how many streams it reached.
    @discardableResult
    public func endEventStreams(_ scope: FaultScope = .all) -> Int {
        host.endEventStreams(scope.value)
    }

    /// Sends every HTTP/2 connection GOAWAY (no error, the last stream the client opened): it
    /// takes no new stream, the streams it has run to their end, and it then closes. A client
    /// opens its next streams on a new connection.
    /// - Returns: how many connections it was sent to.
    @discardableResult
    public func goAwayHTTP2Connections() -> Int {
        host.http2Connections.goAway()
    }

    /// Answers every new connection and WebSocket upgrade with 503 for `duration` (requests to
    /// `/_chaos/` still pass). Open connections are not touched.
    public func refuseConnections(for duration: Duration) {
        host.refusal.refuse(for: duration)
    }

    /// Closes the WebSocket connections in `scope` with a close frame of `code` and `reason`,
    /// and ends the SSE streams in `scope` cleanly.
    ///
    /// A close frame carries at most 125 bytes (RFC 6455 section 5.5), so a reason longer than
    /// 123 bytes of UTF-8 is cut to 123 bytes at a character boundary. (`POST /_chaos/close`
    /// refuses such a reason with 400 instead.)
    /// - Returns: how many connections it reached.
    @discardableResult
    public func closeConnections(_ scope: FaultScope = .all, code: WebSocketCloseCode, reason: String = "") -> Int {
        host.closeConnections(scope.value, code: code, reason: reason)
    }

    /// The longest close reason, in bytes of UTF-8: a close frame's 125 bytes less the code's 2.
    public static let maxCloseReasonBytes = HostServer.maxCloseReasonBytes
}
