import ArgumentParser
import Duplex
import DuplexSchema
import Foundation
import NIOConcurrencyHelpers

/// `duplex ws URL`: a general WebSocket client, in the style of wscat and websocat.
struct WSCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ws",
        abstract: "Connect to a WebSocket: stdin lines become messages, messages go to stdout.",
        discussion: """
            Each line read from stdin is sent as one message; each message received is printed \
            on stdout, one per line (binary messages as base64, or raw with --raw-binary). Status \
            lines go to stderr. At the end of stdin the client closes with 1000 (after --linger \
            seconds). On exit it prints the close code and reason on stderr.

            --preamble TEXT (repeatable) is sent first on the connection, before any line of \
            stdin, as an app's own handshake.

            Commands, on a terminal (or with --commands): /ping sends a ping and prints the round \
            trip; /close [CODE [REASON]] closes with that code (default 1000); /quit closes with \
            1000; //text sends "/text".

            Exits 0 when the connection closes with 1000 or 1001, 1 when the server closes with \
            another code.

            \(Failure.exitStatusHelp)
            """
    )

    @Argument(help: "The ws:// or wss:// URL (http:// and https:// mean the same).")
    var url: String

    @Option(name: .customLong("protocol"), help: ArgumentHelp("A subprotocol to offer; repeatable.", valueName: "name"))
    var protocols: [String] = []

    @Option(help: ArgumentHelp("Send a ping every this many seconds; two missed pongs end the connection.", valueName: "seconds"))
    var pingInterval: Double?

    @Flag(help: "Send stdin lines as binary messages instead of text.")
    var binary = false

    @Flag(help: "Print received binary messages as raw bytes, not base64.")
    var rawBinary = false

    @Option(help: ArgumentHelp("The largest message accepted, in bytes; a larger one closes with 1009.", valueName: "bytes"))
    var maxMessageBytes: Int = 16 * 1024 * 1024

    @Flag(help: "Read /ping, /close and /quit from stdin even when it is not a terminal.")
    var commands = false

    @Option(
        help: ArgumentHelp(
            "After the end of stdin, keep printing what arrives for this many seconds before closing; for servers that answer a close at once, dropping replies still due.",
            valueName: "seconds"))
    var linger: Double = 0

    @Flag(help: "Offer permessage-deflate; messages of 256 bytes or more then go out compressed if the server accepts.")
    var compress = false

    @Option(
        help: ArgumentHelp("Send this text first, before any line of stdin (an app's own hello or auth); repeatable, in order.", valueName: "text"))
    var preamble: [String] = []

    @OptionGroup var connection: ConnectionOptions

    func validate() throws {
        if let pingInterval {
            guard pingInterval >= 0.05, pingInterval <= 86_400 else { throw ValidationError("--ping-interval must be from 0.05 to 86400 seconds") }
        }
        guard maxMessageBytes >= 1 else { throw ValidationError("--max-message-bytes must be positive") }
        guard linger >= 0, linger <= 86_400 else { throw ValidationError("--linger must be from 0 to 86400 seconds") }
        for name in protocols where name.isEmpty || name.contains(where: { $0 == "," || $0 == " " || !$0.isASCII }) {
            throw ValidationError("--protocol \"\(name)\" is not a subprotocol token")
        }
    }

    func run() async throws {
        try await reportingFailures {
            let target = try parseWebSocketURL(url)
            let request = WebSocketRequest(url: target, protocols: protocols, additionalHeaders: try connection.headerFields())
            let ping = pingInterval.map { PingConfig(pingInterval: .milliseconds(Int64($0 * 1000)), maxPingFailures: 2) }
            let socket = WebSocket(
                request: request,
                configuration: try connection.secured(
                    .init(
                        ping: ping,
                        maxMessageBytes: maxMessageBytes,
                        connectTimeout: connection.connectDuration,
                        compression: compress ? PerMessageDeflate() : nil
                    ))
            )
            if !preamble.isEmpty {
                let preamble = self.preamble
                socket.preamble = { connection in
                    for text in preamble { connection.send(text) }
                }
            }
            let console = Console(prompt: "> ")
            let events = socket.events
            let states = socket.stateEvents
            try await socket.connect()
            console.printError("connected to \(target.absoluteString)\(socket.negotiatedProtocol.map { " (protocol \($0))" } ?? "")")
            if compress {
                console.printError(socket.negotiatedExtensions.map { "compression: \($0)" } ?? "compression: declined by the server")
            }
            let input = console.lines()
            let (binary, rawBinary, commands) = (self.binary, self.rawBinary, self.commands || console.isInteractive)
            let linger = Duration.milliseconds(Int64(self.linger * 1000))

            // Prints what arrives until the connection ends; returns how it ended.
            let lastClose = NIOLockedValueBox<(code: WebSocketCloseCode, reason: String)?>(nil)
            let sentClose = NIOLockedValueBox<(code: WebSocketCloseCode, reason: String)?>(nil)
            let reader = Task {
                for await event in events {
                    if case .disconnected(let code, let reason) = event {
                        lastClose.withLockedValue { $0 = (code ?? .abnormalClosure, reason ?? "") }
                    }
                    guard case .message(let message) = event else { continue }
                    switch message {
                    case .string(let text): console.print(text)
                    case .data(let data):
                        if rawBinary, !console.isInteractive {
                            StandardStreams.out(bytes: Array(data) + [0x0A])
                        } else {
                            console.print(data.base64EncodedString())
                        }
                    }
                }
            }
            let ended = Task { () -> WebSocketDisconnectReason in
                for await state in states {
                    if case .disconnected(let reason) = state { return reason }
                }
                return .terminated
            }
            let writer = Task {
                for await line in input {
                    if commands, line.hasPrefix("/"), !line.hasPrefix("//") {
                        if await Self.command(line, socket: socket, console: console, sentClose: sentClose) { return }
                        continue
                    }
                    let text = line.hasPrefix("//") ? String(line.dropFirst()) : line
                    do {
                        try await socket.send(binary ? .binary(Data(text.utf8)) : .text(text))
                    } catch {
                        return
                    }
                }
                // End of input: close normally, after the linger time.
                if linger > .zero { try? await Task.sleep(for: linger) }
                await socket.disconnect()
            }
            let reason = await ended.value
            writer.cancel()
            console.close()
            await socket.terminate()
            await reader.value
            try Self.finish(reason, lastClose: sentClose.withLockedValue { $0 } ?? lastClose.withLockedValue { $0 })
        }
    }

    /// Runs a slash command; true when it ends the session.
    private static func command(
        _ line: String,
        socket: WebSocket,
        console: Console,
        sentClose: NIOLockedValueBox<(code: WebSocketCloseCode, reason: String)?>
    ) async -> Bool {
        let words = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true).map(String.init)
        switch words.first {
        case "/ping":
            do {
                let rtt = try await socket.ping()
                let milliseconds = Double(rtt.components.seconds) * 1000 + Double(rtt.components.attoseconds) / 1e15
                console.printError("pong in \(String(format: "%.2f", milliseconds)) ms")
            } catch {
                console.printError("ping failed: \(Failure(error).message)")
            }
        case "/close":
            var code = WebSocketCloseCode.normalClosure
            if words.count > 1 {
                guard let value = UInt16(words[1]), WebSocketCloseCode(value).isSendable else {
                    console.printError("usage: /close [CODE [REASON]], CODE 1000-1003, 1007-1014 or 3000-4999")
                    return false
                }
                code = WebSocketCloseCode(value)
            }
            let reason = words.count > 2 ? words[2] : ""
            guard reason.utf8.count <= 123 else {
                console.printError("a close reason is at most 123 bytes")
                return false
            }
            sentClose.withLockedValue { $0 = (code, reason) }
            await socket.disconnect(code: code, reason: reason)
            return true
        case "/quit":
            await socket.disconnect()
            return true
        default:
            console.printError("unknown command \(words.first ?? line); try /ping, /close [CODE [REASON]], /quit, or //text to send /text")
        }
        return false
    }

    /// Prints how the connection ended, and fails when it ended badly.
    private static func finish(_ reason: WebSocketDisconnectReason, lastClose: (code: WebSocketCloseCode, reason: String)?) throws {
        switch reason {
        case .manuallyDisconnected, .terminated:
            let shown = lastClose.map { " \($0.code.rawValue)\($0.reason.isEmpty ? "" : " \($0.reason)")" } ?? ""
            printError("closed:\(shown)")
        case .closed(let code, let why):
            printError("closed by the server: \(code.rawValue)\(why.isEmpty ? "" : " \(why)")")
            if code == .abnormalClosure { throw Failure(.connectionLost, "the connection was lost without a close frame") }
            if code != .normalClosure, code != .goingAway { throw Failure(.failed, "the server closed with \(code.rawValue)") }
        case .pingFailed(let missed):
            throw Failure(.connectionLost, "\(missed) pings in a row went unanswered")
        case .error(let error):
            throw Failure(error)
        case .reconnectionGaveUp(let attempts):
            throw Failure(.connectionLost, "gave up reconnecting after \(attempts) attempts")
        }
    }
}
