import DuplexSchema
import Foundation

extension TestWebSocket {
    /// The next chat frame from the server.
    func receiveChat() async throws -> ChatServerFrame {
        try ChatServerFrame.decode(Data(try await receiveText().utf8))
    }

    /// Reads frames until one matches, returning it; the frames skipped are returned too.
    func receiveChat(until match: (ChatServerFrame) -> Bool) async throws -> (frame: ChatServerFrame, skipped: [ChatServerFrame]) {
        var skipped: [ChatServerFrame] = []
        while true {
            let frame = try await receiveChat()
            if match(frame) { return (frame, skipped) }
            skipped.append(frame)
        }
    }

    /// Sends a `say` frame.
    func say(_ text: String, id: String) async throws {
        try await sendText(try ChatClientFrame.say(ChatSay(clientMessageID: id, text: text)).jsonString())
    }

    /// Reads the `welcome` that opens a chat connection.
    func receiveWelcome() async throws -> ChatWelcome {
        let frame = try await receiveChat()
        guard case .welcome(let welcome) = frame else { throw UnexpectedChatFrame(frame: frame, expected: "welcome") }
        return welcome
    }

    /// Reads frames up to the `ack` for `id`; returns it and the room events read before it.
    func receiveAck(for id: String) async throws -> (ack: ChatAck, before: [ChatServerFrame]) {
        let (frame, skipped) = try await receiveChat { frame in
            if case .ack(let ack) = frame { return ack.clientMessageID == id }
            return false
        }
        guard case .ack(let ack) = frame else { throw UnexpectedChatFrame(frame: frame, expected: "ack") }
        return (ack, skipped)
    }

    /// Reads the next frame, which must be an `error`.
    func receiveError() async throws -> ChatErrorFrame {
        let frame = try await receiveChat()
        guard case .error(let error) = frame else { throw UnexpectedChatFrame(frame: frame, expected: "error") }
        return error
    }
}

struct UnexpectedChatFrame: Error, CustomStringConvertible {
    var frame: ChatServerFrame
    var expected: String
    var description: String { "expected \(expected), got \(frame)" }
}

extension ChatServerFrame {
    var message: ChatMessage? {
        if case .message(let message) = self { return message }
        return nil
    }
}
