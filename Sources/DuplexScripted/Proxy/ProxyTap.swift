package import DuplexSchema

/// A side of a proxied connection.
package enum ProxySide: Sendable {
    /// The client, connected to Duplex.
    case client
    /// The upstream, which Duplex connected to.
    case upstream
}

/// Told of a proxied connection's traffic as it arrives (a WebSocket's on the connection's event
/// loop): what each side sent, and how each ended (the recorder writes a cassette of it). One per
/// connection or stream.
package protocol ProxySessionTap: AnyObject, Sendable {
    /// `side` sent `message` (before any rule applied).
    func message(_ message: ScriptedMessage, from side: ProxySide)
    /// An SSE upstream sent `event` (before any rule applied).
    func event(_ event: ServerSentEvent)
    /// `side` sent a close frame with `code` (nil: none) and `reason`.
    func closed(by side: ProxySide, code: UInt16?, reason: String)
    /// `side` went without a close frame; for SSE, the upstream ended its stream, or the client
    /// left.
    func dropped(by side: ProxySide)
}

/// Makes a proxied connection's tap once the upstream answered: from the client's request (an SSE
/// request with its body), the subprotocol the upstream chose and the extensions it agreed to
/// (nil for SSE); nil taps nothing.
package typealias ProxyTapFactory = @Sendable (_ request: ScriptedRequest, _ subprotocol: String?, _ extensions: String?) -> (any ProxySessionTap)?

/// What a proxy route carries besides its path: its script, the counter of its refusals, its
/// breakpoints, and a tap.
struct ProxyRouteState: Sendable {
    var script: ProxyScript
    var refusals: RefusalCounter
    var breakpoints: ProxyBreakpoints
    var tap: ProxyTapFactory?
}
