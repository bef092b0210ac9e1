import DuplexHost
import DequeModule
import DuplexSchema
import Foundation
import Logging
import NIOCore
import NIOWebSocket

/// Replays one recorded WebSocket session on its connection's event loop
/// (`EventLoopWebSocketHandler`): the server's messages and close in order, each once the
/// client's messages recorded before it have arrived and its recorded delay after the step
/// before it has passed; in strict mode each client message is checked against the recording.
final class ReplayWebSocketService: EventLoopWebSocketService {
    var connectionInfo: ConnectionInfo { .init(kind: .webSocket, route: "replay") }

    private let session: Cassette.Session
    private let number: Int
    private let replay: ReplayConfiguration
    private let logger: Logger
    /// How many client messages the recording has from each step on: more are not kept.
    private let clientMessagesFrom: [Int]
    private var handler: EventLoopWebSocketHandler?
    private var context: ChannelHandlerContext?
    /// The next step.
    private var cursor = 0
    /// The client's messages not yet compared with the recording.
    private var received = Deque<Cassette.Message>()
    /// The recorded time of the last step done, and when it was done here.
    private var recordedAt: Duration = .zero
    private var doneAt = NIODeadline.now()
    private var timer: Scheduled<Void>?
    private var stalledUntil: NIODeadline?
    /// Whether the replay is over (a mismatch, the server's close, or the connection's end).
    private var over = false
    /// Whether the client's pings are answered (a `pongs` step withholds them).
    private var answerPings = true

    init(session: Cassette.Session, number: Int, replay: ReplayConfiguration, logger: Logger) {
        self.session = session
        self.number = number
        self.replay = replay
        self.logger = logger
        var counts = [Int](repeating: 0, count: session.steps.count + 1)
        for index in session.steps.indices.reversed() {
            if case .message(.client, _) = session.steps[index].action {
                counts[index] = counts[index + 1] + 1
            } else {
                counts[index] = counts[index + 1]
            }
        }
        clientMessagesFrom = counts
    }

    func start(handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        self.handler = handler
        self.context = context
        doneAt = .now()
        advance()
    }

    func receive(_ message: consuming ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        guard !over else { return }
        let message: Cassette.Message = opcode == .text ? .text(String(buffer: message)) : .binary(Data(message.readableBytesView))
        // The recording's client messages from the cursor on bound what is kept.
        guard received.count < clientMessagesFrom[cursor] else {
            if replay.strict {
                let step = session.steps.indices.contains(cursor) ? cursor + 1 : session.steps.count
                mismatch(step: step, recorded: "no more messages from the client (it has \(clientMessagesFrom[0]) in all)", received: message)
            }
            return
        }
        received.append(message)
        advance()
    }

    func stall(for duration: Duration) {
        stalledUntil = .now() + TimeAmount(duration)
    }

    func closing() {
        over = true
        timer?.cancel()
    }

    func end() {
        over = true
        timer?.cancel()
        handler = nil
        context = nil
    }

    /// Does every step that can be done now, and waits for the next one.
    private func advance() {
        guard let handler, let context else { return }
        timer = nil
        while !over, cursor < session.steps.count {
            let step = session.steps[cursor]
            switch step.action {
            case .message(.client, let expected):
                guard let got = received.popFirst() else { return }
                if replay.strict, !replay.matcher.matches(expected, got) {
                    mismatch(step: cursor + 1, recorded: ReplayMismatch.show(expected), received: got)
                    return
                }
                done(step, at: .now())
            case .close(.client, _, _), .disconnect(.client):
                // The client ends the session here: its close frame, or its TCP end, is the
                // handler's to answer.
                return
            case .event:
                // Not in a WebSocket session (a cassette read from a file has none).
                done(step, at: doneAt)
            case .message(.server, _), .close(.server, _, _), .disconnect(.server), .pongs:
                var due = doneAt + TimeAmount(replay.scaled(step.at - recordedAt))
                if let stalledUntil, stalledUntil > due { due = stalledUntil }
                guard due <= .now() else {
                    let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
                    timer = context.eventLoop.scheduleTask(deadline: due) { bound.value.advance() }
                    return
                }
                done(step, at: due)
                perform(step.action, handler: handler, context: context)
            }
        }
    }

    private func done(_ step: Cassette.Step, at instant: NIODeadline) {
        cursor += 1
        recordedAt = step.at
        doneAt = instant
    }

    private func perform(_ action: Cassette.Step.Action, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        switch action {
        case .message(_, .text(let text)):
            handler.send(ByteBuffer(string: text), opcode: .text, context: context)
            handler.flush(context: context)
        case .message(_, .binary(let data)):
            handler.send(ByteBuffer(bytes: data), opcode: .binary, context: context)
            handler.flush(context: context)
        case .close(_, let code, let reason):
            over = true
            handler.close(code: code.map { WebSocketCloseCode(rawValue: $0) } ?? .normalClosure, reason: reason, context: context)
        case .disconnect:
            over = true
            context.close(promise: nil)
        case .pongs(let answers):
            answerPings = answers
        case .event:
            break
        }
    }

    func pinged(_ payload: ByteBuffer) -> Bool {
        answerPings
    }

    /// Reports a client message the recording does not have there, and closes with 1008.
    private func mismatch(step: Int, recorded: String, received: Cassette.Message) {
        over = true
        timer?.cancel()
        let report = ReplayMismatch(session: number, path: session.path, step: step, recorded: recorded, received: ReplayMismatch.show(received))
        logger.error(
            "replay mismatch",
            metadata: [
                "session": "\(number)", "path": "\(session.path)", "step": "\(step)", "recorded": "\(report.recorded)",
                "received": "\(report.received)",
            ])
        replay.onMismatch?(report)
        guard let handler, let context else { return }
        handler.close(
            code: .policyViolation, reason: "replay mismatch at step \(step): the client's message is not the recorded one", context: context)
    }
}
