/// A fault the `/_chaos/` routes inject, named as the last segment of its path: the one list
/// that the routes (``HostServer/chaosRoutes(enabled:routeNames:)``), their counter
/// (`duplex_faults_injected_total{fault="…"}`) and the handling of each come from. A new fault
/// is a case here, its handling in `HostServer.inject`, and its line in docs/server.md.
package enum ChaosFault: String, CaseIterable, Sendable {
    case drop
    case close
    case stall
    case pathSwitch = "path-switch"
    case endSSE = "end-sse"
    case refuse
    case restart
    case goaway

    /// `POST` here injects it.
    package var path: String { "/_chaos/\(rawValue)" }
}
