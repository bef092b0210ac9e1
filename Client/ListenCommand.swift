import ArgumentParser
import Duplex
import DuplexSchema
import Foundation

/// `duplex listen URL`: a Server-Sent Events client.
struct ListenCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "listen",
        abstract: "Listen to a Server-Sent Events stream and print its events.",
        discussion: """
            Prints one line per event on stdout: "EVENT ID DATA" (ID is - when the event has none, \
            and a multi-line DATA is printed with \\n), or with --json one JSON object per line \
            with the keys "id" (null when none), "event" ("message" when the stream names none), \
            "data" (a string) and "retry" (milliseconds, only when the event set it).

            The first connection must succeed; after that, the stream is reopened per the server's \
            retry: and an exponential backoff, resuming with Last-Event-ID, and each reconnection \
            is reported on stderr. A 204 answer ends it with status 0.

            \(Failure.exitStatusHelp)
            """
    )

    @Argument(help: "The http:// or https:// URL, e.g. http://127.0.0.1:8080/events.")
    var url: String

    @Flag(help: "Print each event as one JSON object per line.")
    var json = false

    @Option(help: ArgumentHelp("Resume after this event id: sent as Last-Event-ID on the first connection.", valueName: "id"))
    var lastEventID: String?

    @Option(help: ArgumentHelp("Exit 0 after this many events.", valueName: "count"))
    var maxEvents: Int?

    @Flag(help: "Do not reconnect: exit when the stream ends (0) or fails.")
    var noRetry = false

    @OptionGroup var connection: ConnectionOptions

    func validate() throws {
        if let maxEvents { guard maxEvents > 0 else { throw ValidationError("--max-events must be positive") } }
        if let lastEventID {
            guard !lastEventID.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
                throw ValidationError("--last-event-id must not contain CR, LF or NUL")
            }
        }
    }

    func run() async throws {
        try await reportingFailures {
            let target = try parseURL(url, schemes: ["http", "https"])
            let manager = ServerSentEventManager(
                request: SSERequest(url: target, additionalHeaders: try connection.headerFields()),
                retryPolicy: noRetry ? .disabled : RetryPolicy(),
                configuration: try connection.secured(SSEConfiguration(connectTimeout: connection.connectDuration)),
                lastEventID: lastEventID
            )
            let events = manager.events
            let states = manager.stateEvents
            try await Self.openFirst(manager, states: manager.stateEvents)
            let (json, maxEvents, noRetry) = (self.json, self.maxEvents, self.noRetry)
            let terminal = isatty(STDOUT_FILENO) == 1
            let outcome = await withTaskGroup(of: ListenOutcome.self) { group in
                group.addTask {
                    var count = 0
                    for await event in events {
                        printOut(json ? Self.json(event) : Self.line(event, terminal: terminal))
                        count += 1
                        if let maxEvents, count >= maxEvents { break }
                    }
                    return .printedAll
                }
                group.addTask { await Self.monitor(states, noRetry: noRetry) }
                let first = await group.next() ?? .printedAll
                if case .stopped = first {
                    // Let the printer write what arrived before the end, then stop it.
                    await manager.terminate()
                    _ = await group.next()
                } else {
                    group.cancelAll()
                    await manager.terminate()
                }
                return first
            }
            if case .stopped(let failure?) = outcome { throw failure }
        }
    }

    /// Reports reconnections on stderr; returns when the stream stops for good, with the failure
    /// if it failed.
    private static func monitor(_ states: AsyncStream<SSEState>, noRetry: Bool) async -> ListenOutcome {
        // The answers the manager does not retry (its default policy), and so end the command.
        let final: Set<SSEError.Code> = [.noContent, .badStatus, .badContentType, .tlsFailed, .proxyFailed, .invalidURL, .invalidHeader, .retriesExhausted]
        var connected = true
        for await state in states {
            switch state {
            case .connected:
                if !connected { printError("reconnected") }
                connected = true
            case .disconnected(.streamEnded):
                if noRetry { return .stopped(nil) }
                if connected { printError("the stream ended; reconnecting") }
                connected = false
            case .disconnected(.streamError(let error)):
                if error.code == .noContent {
                    printError(error.message)
                    return .stopped(nil)
                }
                if noRetry || final.contains(error.code) { return .stopped(Failure(error)) }
                printError("\(connected ? "the stream failed" : "reconnection failed"): \(error.message); reconnecting")
                connected = false
            case .disconnected:
                return .stopped(nil)
            case .connecting, .notConnected:
                break
            }
        }
        return .stopped(nil)
    }

    /// Opens the stream; fails at the first failed attempt rather than retrying it.
    private static func openFirst(_ manager: ServerSentEventManager, states: AsyncStream<SSEState>) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await manager.connect() }
            group.addTask {
                for await state in states {
                    if case .disconnected(.streamError(let error)) = state { throw error }
                    if case .connected = state { return }
                }
            }
            defer { group.cancelAll() }
            do {
                try await group.next()
            } catch {
                await manager.terminate()
                if let error = error as? SSEError, error.code == .noContent {
                    printError(error.message)
                    throw ExitCode.success
                }
                throw error
            }
        }
    }

    /// One event as a line; on a terminal, with control characters made visible.
    static func line(_ event: ServerSentEvent, terminal: Bool) -> String {
        let line = "\(event.event ?? "message") \(event.id ?? "-") \(event.data.replacingOccurrences(of: "\n", with: "\\n"))"
        return terminal ? UntrustedText.visible(line) : line
    }

    static func json(_ event: ServerSentEvent) -> String {
        var object: [String: Any] = [
            "id": event.id.map { $0 as Any } ?? NSNull(),
            "event": event.event ?? "message",
            "data": event.data,
        ]
        if let retry = event.retry { object["retry"] = retry }
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]) else {
            return "{}"
        }
        return String(decoding: data, as: UTF8.self)
    }
}

/// How `duplex listen` ended.
enum ListenOutcome: Sendable {
    /// It printed `--max-events` events.
    case printedAll
    /// The stream stopped for good, with the failure if it failed.
    case stopped(Failure?)
}
