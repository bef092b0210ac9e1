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

            The first connection must succeed; after that, a GET stream is reopened per the \
            server's retry: and an exponential backoff, resuming with Last-Event-ID, and each \
            reconnection is reported on stderr. A 204 answer ends it with status 0.

            Streaming APIs, with curl's spellings: -X POST (or PUT, PATCH, ...) and -d DATA (or \
            -d @FILE, -d @- for stdin; -d alone means POST, and without -H 'Content-Type: ...' \
            sends application/x-www-form-urlencoded, as curl does). A stream opened by any \
            method but GET is answered once: it is never sent again after the server answered, \
            its clean end exits 0, and a drop exits 7. --until DATA (for example --until \
            '[DONE]') prints the event whose data is DATA, then exits 0. A refusal (4xx, 5xx) \
            exits 6 and prints the server's body on stderr (up to 64 KiB).

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

    @Option(
        name: [.customShort("X"), .customLong("request")],
        help: ArgumentHelp("The request method (default GET, or POST with --data).", valueName: "method"))
    var method: String?

    @Option(
        name: [.customShort("d"), .customLong("data")],
        help: ArgumentHelp("Send this request body (POST unless -X says otherwise); @FILE reads a file, @- stdin.", valueName: "data"))
    var data: String?

    @Option(help: ArgumentHelp("Exit 0 after the event whose data is exactly this, e.g. '[DONE]'.", valueName: "data"))
    var until: String?

    @OptionGroup var connection: ConnectionOptions

    func validate() throws {
        if let maxEvents { guard maxEvents > 0 else { throw ValidationError("--max-events must be positive") } }
        if data != nil, method == "GET" { throw ValidationError("-X GET sends no body: drop -d, or use -X POST") }
        if let lastEventID {
            guard !lastEventID.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) else {
                throw ValidationError("--last-event-id must not contain CR, LF or NUL")
            }
        }
    }

    func run() async throws {
        try await reportingFailures {
            let target = try parseURL(url, schemes: ["http", "https"])
            let request = try makeRequest(target)
            let manager = ServerSentEventManager(
                request: request,
                retryPolicy: noRetry ? .disabled : RetryPolicy(),
                configuration: try connection.secured(SSEConfiguration(connectTimeout: connection.connectDuration)),
                lastEventID: lastEventID
            )
            let events = manager.events
            let states = manager.stateEvents
            try await Self.openFirst(manager, states: manager.stateEvents)
            let (json, maxEvents, noRetry) = (self.json, self.maxEvents, self.noRetry || !request.isResumable)
            let terminal = isatty(STDOUT_FILENO) == 1
            let outcome = await withTaskGroup(of: ListenOutcome.self) { group in
                group.addTask {
                    var count = 0
                    for await event in events {
                        printOut(json ? Self.json(event) : Self.line(event, terminal: terminal))
                        count += 1
                        if let maxEvents, count >= maxEvents { return .printedAll }
                    }
                    return .eventsEnded
                }
                group.addTask { await Self.monitor(states, manager: manager, noRetry: noRetry) }
                let first = await group.next() ?? .printedAll
                switch first {
                case .stopped:
                    // Let the printer write what arrived before the end, then stop it.
                    await manager.terminate()
                    _ = await group.next()
                    return first
                case .eventsEnded:
                    // The events end when the stream stopped for good; how it stopped (a clean
                    // end, or a drop that exits 7) is the states' to say, and they may come a
                    // moment after the last event.
                    return await group.next() ?? .stopped(nil)
                case .printedAll:
                    group.cancelAll()
                    await manager.terminate()
                    return first
                }
            }
            if case .stopped(let failure?) = outcome { throw failure }
        }
    }

    /// The request the options describe.
    private func makeRequest(_ target: URL) throws -> SSERequest {
        var headers = try connection.headerFields()
        var body: Data?
        if let data {
            body = try Self.body(data)
            if !headers.keys.contains(where: { $0.lowercased() == "content-type" }) {
                headers["Content-Type"] = "application/x-www-form-urlencoded"
            }
        }
        let method = method.map(SSERequest.Method.init) ?? (body == nil ? .get : .post)
        return SSERequest(url: target, method: method, body: body, additionalHeaders: headers, terminalEvent: until.map { .data($0) })
    }

    /// `-d`'s body: the text itself, or `@FILE`'s bytes, or stdin's for `@-`.
    private static func body(_ data: String) throws -> Data {
        guard data.hasPrefix("@") else { return Data(data.utf8) }
        let path = String(data.dropFirst())
        if path == "-" { return FileHandle.standardInput.readDataToEndOfFile() }
        do {
            return try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw Failure(.badURL, "-d @\(path): cannot read the file: \(error.localizedDescription)")
        }
    }

    /// Reports reconnections on stderr; returns when the stream stops for good, with the failure
    /// if it failed. A failure after the stream opened is a lost connection (exit 7).
    private static func monitor(_ states: AsyncStream<SSEState>, manager: ServerSentEventManager, noRetry: Bool) async -> ListenOutcome {
        // The answers the manager does not retry (its default policy), and so end the command.
        let final: Set<SSEError.Code> = [
            .noContent, .badStatus, .badContentType, .tlsFailed, .proxyFailed, .invalidURL, .invalidHeader, .retriesExhausted,
        ]
        var connected = true
        for await state in states {
            switch state {
            case .connected:
                if !connected { printError("reconnected") }
                connected = true
            case .disconnected(.streamEnded):
                if noRetry || manager.hasFinished { return .stopped(nil) }
                if connected { printError("the stream ended; reconnecting") }
                connected = false
            case .disconnected(.streamError(let error)):
                if error.code == .noContent {
                    printError(error.message)
                    return .stopped(nil)
                }
                if connected, [.connectionFailed, .readTimeout].contains(error.code), noRetry {
                    return .stopped(Failure(.connectionLost, "the stream was lost: \(error.message)"))
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
                if let error = error as? SSEError, error.code == .badStatus, let response = error.response, !response.body.isEmpty {
                    Self.printRefusal(response)
                    throw ExitCode(Failure.status(for: error.code).rawValue)
                }
                throw error
            }
        }
    }

    /// A refused request on stderr: its status, then its body's lines (control characters made
    /// visible), as the server sent it, up to 64 KiB.
    private static func printRefusal(_ response: SSEErrorResponse) {
        var head = "duplex: the server answered HTTP \(response.status)"
        if let retryAfter = response.retryAfter { head += " (Retry-After: \(retryAfter.prefix(100)))" }
        printError(UntrustedText.visible(head + (response.bodyTruncated ? "; the start of its body:" : "; its body:")))
        for line in response.text.split(separator: "\n", omittingEmptySubsequences: false) {
            printError(UntrustedText.visible(String(line)))
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
    /// The events ended: the stream stopped, and the states say how.
    case eventsEnded
    /// The stream stopped for good, with the failure if it failed.
    case stopped(Failure?)
}
