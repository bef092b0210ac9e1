import ArgumentParser
import Duplex
import DuplexSchema
import Foundation

/// `duplex echo URL [MESSAGE...]`: a smoke test of an echo endpoint in one line.
struct EchoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "echo",
        abstract: "Send messages to a WebSocket echo endpoint and check the replies.",
        discussion: """
            Sends each MESSAGE (or one message of its own when none is given), prints each reply \
            on stdout, and exits 0 when every reply equals what was sent, in order.

            \(Failure.exitStatusHelp)
            """
    )

    @Argument(help: "The ws:// or wss:// URL (http:// and https:// mean the same), e.g. ws://127.0.0.1:8080/echo.")
    var url: String

    @Argument(help: "The messages to send; each is one WebSocket message.")
    var messages: [String] = []

    @Flag(help: "Send binary messages instead of text.")
    var binary = false

    @Option(help: ArgumentHelp("Seconds to wait for each reply.", valueName: "seconds"))
    var timeout: Double = 5

    @OptionGroup var connection: ConnectionOptions

    func validate() throws {
        guard timeout > 0, timeout <= 86_400 else { throw ValidationError("--timeout must be from 0 to 86400 seconds") }
    }

    func run() async throws {
        try await reportingFailures {
            let target = try parseWebSocketURL(url)
            let request = WebSocketRequest(url: target, additionalHeaders: try connection.headerFields())
            let socket = WebSocket(
                request: request,
                configuration: try connection.secured(.init(connectTimeout: connection.connectDuration))
            )
            let replies = socket.events
            try await socket.connect()
            let sent = messages.isEmpty ? ["duplex echo \(UInt32.random(in: .min ... .max))"] : messages
            let (binary, timeout) = (self.binary, self.timeout)
            let limit = Duration.milliseconds(Int64(timeout * 1000))
            // Each reply is awaited on the stream itself; the watchdog fails the exchange when a
            // reply takes longer than the limit.
            let watchdog = Watchdog(limit: limit)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    var iterator = replies.makeAsyncIterator()
                    for (index, text) in sent.enumerated() {
                        let message: WebSocketMessage = binary ? .binary(Data(text.utf8)) : .text(text)
                        watchdog.reset(because: "no reply to message \(index + 1) within \(timeout) s")
                        try await socket.send(message)
                        let reply = try await Self.nextMessage(&iterator, index: index + 1)
                        printOut(reply.text ?? String(decoding: reply.data, as: UTF8.self))
                        guard reply == message else {
                            throw Failure(.failed, "reply \(index + 1) does not match: sent \(Self.describe(message)), got \(Self.describe(reply))")
                        }
                    }
                }
                group.addTask { try await watchdog.run() }
                defer { group.cancelAll() }
                do {
                    try await group.next()
                } catch {
                    await socket.terminate()
                    throw error
                }
            }
            await socket.disconnect()
        }
    }

    private static func nextMessage(_ iterator: inout AsyncStream<WebSocketEvent>.Iterator, index: Int) async throws -> WebSocketMessage {
        while let event = await iterator.next() {
            switch event {
            case .message(let message):
                return message
            case .disconnected(let code?, let reason):
                let shown = reason.map { $0.isEmpty ? "" : " \($0)" } ?? ""
                throw Failure(.failed, "the server closed the connection (\(code.rawValue)\(shown)) before reply \(index)")
            case .disconnected(nil, _):
                throw Failure(.connectionLost, "the connection was lost (1006, no close frame) before reply \(index)")
            case .error(let error):
                throw Failure(error)
            case .connected:
                continue
            }
        }
        throw Failure(.connectionLost, "the connection ended before reply \(index)")
    }

    private static func describe(_ message: WebSocketMessage) -> String {
        switch message {
        case .string(let text): "text \(text.debugDescription)"
        case .data(let data): "binary (\(data.count) bytes)"
        }
    }
}
