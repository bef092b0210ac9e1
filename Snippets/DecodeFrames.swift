import DuplexSchema
import Foundation

func show(chatFrame text: String, eventStreamBytes bytes: [UInt8]) throws {
    let frame = try ChatServerFrame.decode(Data(text.utf8))
    if case .message(let message) = frame { print("#\(message.seq) \(message.from): \(message.text)") }

    var parser = ServerSentEventParser()
    for event in try parser.parse(bytes) { print(event.id ?? "-", event.event ?? "message", event.data) }
}
