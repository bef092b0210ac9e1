import ArgumentParser
import Duplex
import DuplexSchema
import Foundation

/// `duplex chat URL --name NAME`: a chat room client, for two terminals or more.
struct ChatCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat",
        abstract: "Join a Duplex chat room: type lines to say them, see everyone else's.",
        discussion: """
            Lines typed are sent; messages, joins and leaves are printed above the line being \
            typed. Commands: /who lists who is here, /check checks the connection at once (as \
            after a network change: a connection found half-open is replaced within 2 s, not \
            after the pings' timeout), /quit leaves (so do Ctrl-C and Ctrl-D), /help. A line \
            starting with // says it with one / fewer.

            When the connection drops, the client says so, reconnects with backoff, and resumes \
            where it left off: nothing said is lost, and nothing is shown twice. When stdin is not \
            a terminal, it reads and prints plain lines; at the end of stdin it waits for what it \
            said to be delivered (up to --timeout), then leaves.

            \(Failure.exitStatusHelp)
            """
    )

    @Argument(help: "The room's ws:// or wss:// URL (http:// and https:// mean the same), e.g. ws://127.0.0.1:8080/chat/lobby.")
    var url: String

    @Option(help: "Your name in the room: 1 to 32 letters, digits, spaces, '.', '_' or '-'.")
    var name: String

    @Option(help: ArgumentHelp("Seconds to wait to join, and for delivery at the end of input.", valueName: "seconds"))
    var timeout: Double = 10

    @Option(
        help: ArgumentHelp(
            "Send a ping every this many seconds; two missed pongs count the connection as lost, and it reconnects. Default 10.",
            valueName: "seconds"))
    var pingInterval: Double?

    @OptionGroup var connection: ConnectionOptions

    func validate() throws {
        guard timeout > 0, timeout <= 86_400 else { throw ValidationError("--timeout must be from 0 to 86400 seconds") }
        if let pingInterval {
            guard pingInterval >= 0.05, pingInterval <= 86_400 else { throw ValidationError("--ping-interval must be from 0.05 to 86400 seconds") }
        }
        do {
            try ChatLimits().validate(name: name)
        } catch {
            throw ValidationError("--name: \(error.reason)")
        }
    }

    func run() async throws {
        try await reportingFailures {
            let target = try parseWebSocketURL(url)
            var configuration = ChatClient.defaultConfiguration
            configuration.connectTimeout = connection.connectDuration
            configuration.tlsTrust = try connection.tlsTrust()
            configuration.tlsIdentity = try connection.tlsIdentity()
            configuration.proxy = try connection.proxySetting()
            if let pingInterval { configuration.ping = PingConfig(pingInterval: .milliseconds(Int64(pingInterval * 1000)), maxPingFailures: 2) }
            let chat = ChatClient(url: target, name: name, configuration: configuration)
            let headers = try connection.headerFields()
            if !headers.isEmpty {
                let prepare = chat.socket.prepareRequest
                chat.socket.prepareRequest = { request in
                    var request = await prepare?(request) ?? request
                    request.additionalHeaders.merge(headers) { _, new in new }
                    return request
                }
            }
            let limit = Duration.milliseconds(Int64(timeout * 1000))
            let events = chat.events
            let welcome = try await chat.join(timeout: limit)
            let console = Console(prompt: "\(name)> ", escapeControls: true)
            console.print("* joined #\(welcome.room) as \(welcome.name); here: \(welcome.members.joined(separator: ", "))")
            if !console.isInteractive { console.print("* type a line to say it; /who, /check, /quit") }
            let printer = Task { () -> Failure? in
                var session = welcome.session
                var lost = false
                for await event in events {
                    switch event {
                    case .disconnected(_, reconnecting: true) where lost:
                        continue  // another failed attempt: "reconnecting" was said already
                    case .disconnected(_, reconnecting: true):
                        lost = true
                    case .welcome(let welcome, _):
                        lost = false
                        session = welcome.session
                    case .joined(let presence) where presence.session == session:
                        continue  // the welcome line said it
                    default:
                        break
                    }
                    if let failure = Self.show(event, console: console) { return failure }
                }
                return nil
            }
            let input = console.lines()
            let typist = Task {
                for await line in input {
                    let trimmed = line.trimmingCharacters(in: .whitespaces)
                    if trimmed.isEmpty { continue }
                    if trimmed.hasPrefix("/"), !trimmed.hasPrefix("//") {
                        switch trimmed.split(separator: " ").first {
                        case "/quit", "/exit": return
                        case "/who":
                            let members = chat.members
                            console.print("* \(members.count) here: \(members.joined(separator: ", "))")
                        case "/check":
                            // A connection found dead is reported by the printer's "connection lost" line.
                            if await chat.checkConnection(within: .seconds(2)) { console.print("* connection checked: it answered") }
                        case "/help":
                            console.print("* /who lists who is here, /check checks the connection now, /quit leaves, //text says /text")
                        default:
                            console.printError("! unknown command \(trimmed); try /help")
                        }
                        continue
                    }
                    let text = trimmed.hasPrefix("//") ? String(line.drop { $0 == " " }.dropFirst()) : line
                    do {
                        try await chat.say(text)
                    } catch let error as ChatProtocolError {
                        console.printError("! not sent: \(error.reason)")
                    } catch {
                        console.printError("! not sent: \(Failure(error).message)")
                    }
                }
                // End of input: deliver what was said before leaving.
                if chat.pendingCount > 0, await !chat.waitForDelivery(timeout: limit) {
                    console.printError("! \(chat.pendingCount) message(s) not delivered")
                }
            }
            // Ends at /quit or end of input, or when the connection ends for good.
            let failure: Failure? = await withTaskGroup(of: Failure?.self) { group in
                group.addTask {
                    await typist.value; return nil
                }
                group.addTask { await printer.value }
                let first = await group.next() ?? nil
                group.cancelAll()
                typist.cancel()
                printer.cancel()
                return first
            }
            let undelivered = chat.pendingCount
            await chat.leave()
            console.close()
            if let failure { throw failure }
            if undelivered > 0 { throw Failure(.failed, "\(undelivered) message(s) were not delivered") }
        }
    }

    /// Prints one event; returns a failure when the connection ended for good.
    private static func show(_ event: ChatEvent, console: Console) -> Failure? {
        switch event {
        case .welcome(let welcome, let resumed):
            if resumed { console.print("* reconnected to #\(welcome.room); here: \(welcome.members.joined(separator: ", "))") }
        case .message(let message):
            console.print("[\(clock(message.sentAt))] \(message.from): \(message.text)")
        case .joined(let presence):
            console.print("* \(presence.name) joined")
        case .left(let presence):
            console.print("* \(presence.name) left")
        case .delivered:
            break
        case .rejected(let error):
            console.printError("! the server rejected a message: \(error.code.rawValue): \(error.reason)")
        case .missed(let seqs):
            console.printError("! \(seqs.count) event(s) were missed while disconnected (no longer kept by the server)")
        case .historyReset(_, let missedAfter):
            console.printError(
                "! the server lost its history; \(missedAfter.map { "messages after \(clock($0))" } ?? "messages sent while disconnected") may be missing"
            )
        case .disconnected(let reason, let reconnecting):
            if reconnecting {
                console.printError("! connection lost (\(reason)); reconnecting…")
            } else {
                switch reason {
                case .manuallyDisconnected, .terminated:
                    return nil
                case .closed(let code, _) where code == .normalClosure || code == .goingAway:
                    return Failure(.connectionLost, "the server closed the room (\(code.rawValue))")
                default:
                    return Failure(.connectionLost, "the connection ended: \(reason)")
                }
            }
        }
        return nil
    }

    private static func clock(_ date: Date) -> String {
        let parts = Calendar.current.dateComponents([.hour, .minute, .second], from: date)
        return String(format: "%02d:%02d:%02d", parts.hour ?? 0, parts.minute ?? 0, parts.second ?? 0)
    }
}
