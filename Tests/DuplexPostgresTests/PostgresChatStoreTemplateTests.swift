import DuplexSchema
import Foundation
import Testing

@testable import DuplexPostgres

/// The PostgreSQL store's message template: a frame's JSON made once, with its seq filled in by
/// the query.
@Suite("PostgresChatStore.template")
struct PostgresChatStoreTemplateTests {
    @Test("PostgresChatStore.template splits a frame's JSON around its seq, once")
    func template() throws {
        let at = Date(timeIntervalSince1970: 0)
        let (prefix, suffix) = try PostgresChatStore.template { seq in
            .message(ChatMessage(room: "r", seq: seq, clientMessageID: "c", from: "a", text: #"a "seq":9007199254740991 b"#, sentAt: at))
        }
        let json = prefix + "42" + suffix
        guard case .message(let message) = try ChatServerFrame.decode(Data(json.utf8)) else {
            Issue.record("not a message: \(json)")
            return
        }
        #expect(message.seq == 42 && message.text == #"a "seq":9007199254740991 b"#)
    }
}
