#if DEBUG
@testable import DuplexChat
@testable import DuplexServer
import DuplexSchema
import Foundation

/// The chat frame decoders: a client's frame as the server reads it (with the room's limits),
/// and a server's frame as the client reads it.
enum ChatFrameFuzz {
    static let target = FuzzTarget(
        name: "chat-frames",
        properties:
            "no crash; a frame that decodes encodes to JSON that decodes to the same frame (client frames exactly; server frames after one round, dates being rounded to milliseconds); the server's say parser answers every text with a say within the limits or an error frame"
    ) { bytes in
        let data = Data(bytes)
        if let frame = try? ChatClientFrame.decode(data) {
            let json = try? frame.jsonString()
            require(json != nil, "a decoded client frame does not encode: \(frame)")
            let again = try? ChatClientFrame.decode(Data(json!.utf8))
            require(again == frame, "client frame round trip: \(frame) -> \(json!) -> \(String(describing: again))")
        }
        if let frame = try? ChatServerFrame.decode(data) {
            let first = try? frame.jsonString()
            require(first != nil, "a decoded server frame does not encode: \(frame)")
            let decoded = try? ChatServerFrame.decode(Data(first!.utf8))
            require(decoded != nil, "a server frame's own JSON does not decode: \(first!)")
            let second = try? decoded!.jsonString()
            require(second == first, "server frame round trip: \(first!) -> \(String(describing: second))")
        }
        let limits = ChatLimits()
        switch ChatFrames.parseSay(text: String(decoding: bytes, as: UTF8.self), limits: limits) {
        case .success(let say):
            require((try? limits.validate(text: say.text)) != nil, "a say past the text limit was accepted")
            require((try? limits.validate(messageID: say.clientMessageID)) != nil, "a say with a bad id was accepted")
        case .failure(let refusal):
            guard case .error = refusal.frame else { return require(false, "a refusal that is not an error frame: \(refusal.frame)") }
        }
    }
}
#endif
