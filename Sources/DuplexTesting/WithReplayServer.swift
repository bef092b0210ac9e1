public import DuplexSchema
public import DuplexServer
public import Foundation
public import Logging
import NIOConcurrencyHelpers

/// What a replay found that the recording did not have: every mismatch, in the order they
/// happened. Thrown by `withReplayServer` in strict mode.
public struct ReplayMismatches: Error, CustomStringConvertible, Sendable {
    /// The mismatches, each with both sides.
    public var mismatches: [ReplayMismatch]

    public var description: String {
        mismatches.map(\.description).joined(separator: "\n")
    }
}

/// A running replay server, as `withReplayServer` hands it to its body.
public struct RunningReplayServer: Sendable {
    /// The server underneath.
    public let running: RunningDuplexServer
    private let reports: NIOLockedValueBox<[ReplayMismatch]>

    init(running: RunningDuplexServer, reports: NIOLockedValueBox<[ReplayMismatch]>) {
        self.running = running
        self.reports = reports
    }

    /// `ws://127.0.0.1:PORT/path`: where the sessions recorded at `path` are replayed.
    public func webSocketURL(_ path: String) -> URL { running.webSocketURL(path) }

    /// `http://127.0.0.1:PORT/path`: where the SSE sessions recorded at `path` are replayed.
    public func httpURL(_ path: String) -> URL { running.httpURL(path) }

    /// The mismatches reported so far, in strict mode.
    public var mismatches: [ReplayMismatch] { reports.withLockedValue { $0 } }
}

/// Serves `cassette`'s recorded server side on a free loopback port for the duration of `body`
/// (`ReplayConfiguration`), then stops.
///
/// ```swift
/// let cassette = try Cassette(jsonLines: String(contentsOf: cassetteURL, encoding: .utf8))
/// try await withReplayServer(cassette) { server in
///     let socket = WebSocket(url: server.webSocketURL("/echo"))
///     // drive the client: it meets the recorded server
/// }
/// ```
///
/// In strict mode (the default), each message the client sends is checked against the recording
/// with `matcher`; a mismatch closes that connection with 1008, and once `body` ends, the
/// mismatches are thrown as ``ReplayMismatches`` (each with both sides), so the test fails
/// even when `body` did not notice, and in place of `body`'s own error when it did.
/// - Parameters:
///   - cassette: the sessions to serve.
///   - strict: whether the client's messages are checked.
///   - matcher: how a client's message is compared with the recorded one.
///   - speed: how much faster than recorded the server's steps follow each other; by default
///     `.infinity`, each step as soon as the client's messages before it arrived.
///   - builtInRoutes: whether the server's own routes (`/echo`, `/chat/{room}`, `/events`, …)
///     answer where the cassette recorded nothing. Default false: any other path is 404.
///   - configuration: the server's other settings (its SSE `retry:`, limits, compression); its
///     port is replaced by a free one.
///   - logger: the server's logger; by default one that logs nothing below `.critical`.
///   - body: the code to run while the server listens.
/// - Returns: what `body` returns.
public func withReplayServer<Result: Sendable>(
    _ cassette: Cassette,
    strict: Bool = true,
    matcher: ReplayMatcher = .exact,
    speed: Double = .infinity,
    builtInRoutes: Bool = false,
    configuration: DuplexServerConfiguration = .init(),
    logger: Logger? = nil,
    _ body: (RunningReplayServer) async throws -> Result
) async throws -> Result {
    let reports = NIOLockedValueBox<[ReplayMismatch]>([])
    var configuration = configuration
    configuration.replay = ReplayConfiguration(cassette: cassette, speed: speed, strict: strict, matcher: matcher) { mismatch in
        reports.withLockedValue { $0.append(mismatch) }
    }
    configuration.replay?.builtInRoutes = builtInRoutes
    let outcome: Swift.Result<Result, any Error>
    do {
        outcome = .success(
            try await withDuplexServer(configuration: configuration, logger: logger) { running in
                try await body(RunningReplayServer(running: running, reports: reports))
            }
        )
    } catch {
        outcome = .failure(error)
    }
    let mismatches = reports.withLockedValue { $0 }
    guard mismatches.isEmpty else { throw ReplayMismatches(mismatches: mismatches) }
    return try outcome.get()
}
