import DuplexSchema
import Foundation
import Testing

@Suite("chat frames")
struct ChatFrameTests {
    static let date = Date(timeIntervalSince1970: 1_795_009_600.125)  // exact in binary

    static let serverFrames: [ChatServerFrame] = [
        .welcome(ChatWelcome(session: "s-1", room: "lobby", name: "alice", members: ["alice", "bob"], latestSeq: 4, oldestSeq: 1)),
        .welcome(ChatWelcome(session: "s-2", room: "new", name: "bob", members: ["bob"], latestSeq: 0, oldestSeq: nil)),
        .message(ChatMessage(room: "lobby", seq: 5, clientMessageID: "c-1", from: "alice", text: "hi ✓ \"quoted\"\nline", sentAt: date)),
        .joined(ChatPresence(room: "lobby", seq: 6, name: "carol", session: "s-3", at: date)),
        .left(ChatPresence(room: "lobby", seq: 7, name: "carol", session: "s-3", at: date)),
        .ack(ChatAck(clientMessageID: "c-1", seq: 5)),
        .ack(ChatAck(clientMessageID: "c-1", seq: 5, duplicate: true)),
        .error(ChatErrorFrame(code: .textTooLong, reason: "too long", clientMessageID: "c-2")),
        .error(ChatErrorFrame(code: .badJSON, reason: "not JSON")),
    ]

    @Test("every server frame round-trips through JSON, with its type and version")
    func serverFramesRoundTrip() throws {
        for frame in Self.serverFrames {
            let json = try frame.jsonString()
            #expect(try ChatServerFrame.decode(Data(json.utf8)) == frame, "\(json)")
            let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
            #expect(object["type"] as? String == frame.type)
            #expect(object["v"] as? Int == ChatProtocol.version)
        }
    }

    @Test("the say frame round-trips, and uses the documented keys")
    func sayRoundTrip() throws {
        let frame = ChatClientFrame.say(ChatSay(clientMessageID: "c-9", text: "hello"))
        let json = try frame.jsonString()
        #expect(json == #"{"clientMessageId":"c-9","text":"hello","type":"say","v":1}"#)
        #expect(try ChatClientFrame.decode(Data(json.utf8)) == frame)
    }

    @Test("timestamps are ISO-8601 UTC with milliseconds, and parse with or without them")
    func timestamps() throws {
        #expect(ChatTimestamp.format(Self.date) == "2026-11-18T13:46:40.125Z")
        #expect(ChatTimestamp.format(Date(timeIntervalSince1970: 1_795_009_600.1239)) == "2026-11-18T13:46:40.124Z", "rounded, not truncated")
        #expect(ChatTimestamp.format(Date(timeIntervalSince1970: 1_795_009_600)) == "2026-11-18T13:46:40.000Z")
        #expect(ChatTimestamp.format(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59.500Z")
        #expect(ChatTimestamp.parse("2026-11-18T13:46:40.125Z") == Self.date)
        #expect(ChatTimestamp.parse("2026-11-18T13:46:40Z") == Date(timeIntervalSince1970: 1_795_009_600))
        #expect(ChatTimestamp.parse("yesterday") == nil)
    }

    @Test("a bad client frame is reported with the precise code")
    func clientDecodingErrors() {
        let cases: [(String, ChatErrorCode)] = [
            ("", .badJSON),
            ("{", .badJSON),
            ("\"say\"", .badJSON),
            ("[]", .badJSON),
            ("{}", .unknownType),
            (#"{"type":7}"#, .unknownType),
            (#"{"type":"welcome"}"#, .unknownType),
            (#"{"type":"say","v":"1","clientMessageId":"a","text":"b"}"#, .unsupportedVersion),
            (#"{"type":"say","v":99,"clientMessageId":"a","text":"b"}"#, .unsupportedVersion),
            (#"{"type":"say"}"#, .invalidFrame),
            (#"{"type":"say","clientMessageId":1,"text":"b"}"#, .invalidFrame),
        ]
        for (json, code) in cases {
            do {
                _ = try ChatClientFrame.decode(Data(json.utf8))
                Issue.record("\(json) decoded")
            } catch {
                #expect(error.code == code, "\(json): \(error.reason)")
            }
        }
    }

    @Test("a missing v is read as the current version; unknown fields are ignored")
    func lenientDecoding() throws {
        let frame = try ChatClientFrame.decode(Data(#"{"type":"say","clientMessageId":"a","text":"b","extra":[1]}"#.utf8))
        #expect(frame == .say(ChatSay(clientMessageID: "a", text: "b")))
    }
}

@Suite("chat limits")
struct ChatLimitsTests {
    let limits = ChatLimits()

    @Test("rooms: 1 to 64 of A-Z a-z 0-9 . _ -")
    func rooms() {
        for good in ["lobby", "a", "Room_1.two-3", String(repeating: "r", count: 64)] {
            #expect(throws: Never.self) { try limits.validate(room: good) }
        }
        for bad in ["", "has space", "slash/", "é", String(repeating: "r", count: 65), "new\nline"] {
            #expect(throws: ChatProtocolError.self, "\(bad.debugDescription)") { try limits.validate(room: bad) }
        }
    }

    @Test("names: 1 to 32 letters, digits, marks, spaces inside and . _ -")
    func names() {
        for good in ["alice", "Zoë", "José María", "李雷", "a.b_c-d", "x1", String(repeating: "n", count: 32), "e\u{301}"] {
            #expect(throws: Never.self, "\(good)") { try limits.validate(name: good) }
        }
        for bad in ["", " lead", "trail ", "tab\tname", "new\nline", "semi;colon", "emoji😀", String(repeating: "n", count: 33)] {
            #expect(throws: ChatProtocolError.self, "\(bad.debugDescription)") { try limits.validate(name: bad) }
        }
    }

    @Test("message ids: 1 to 64 printable ASCII without spaces")
    func messageIDs() {
        #expect(throws: Never.self) { try limits.validate(messageID: "c-1:2/3~!") }
        for bad in ["", "has space", "é", String(repeating: "i", count: 65)] {
            #expect(throws: ChatProtocolError.self) { try limits.validate(messageID: bad) }
        }
    }

    @Test("texts: some non-whitespace, at most maxTextBytes of UTF-8")
    func texts() throws {
        #expect(throws: Never.self) { try limits.validate(text: "  hi  ") }
        #expect(throws: Never.self) { try limits.validate(text: String(repeating: "a", count: 4096)) }
        do {
            try limits.validate(text: " \n\t ")
            Issue.record("whitespace accepted")
        } catch { #expect(error.code == .emptyText) }
        do {
            try limits.validate(text: String(repeating: "é", count: 2049))  // 4098 bytes
            Issue.record("long text accepted")
        } catch { #expect(error.code == .textTooLong) }
    }
}

@Suite("close codes")
struct WebSocketCloseCodeTests {
    @Test("registry codes, ranges and which codes may be sent")
    func codes() {
        #expect(WebSocketCloseCode.goingAway.rawValue == 1001)
        #expect(WebSocketCloseCode.messageTooBig.rawValue == 1009)
        #expect(WebSocketCloseCode.invalidFramePayloadData.rawValue == 1007)
        #expect(WebSocketCloseCode.normalClosure.isSendable)
        #expect(!WebSocketCloseCode.abnormalClosure.isSendable)
        #expect(!WebSocketCloseCode.noStatusReceived.isSendable)
        #expect(!WebSocketCloseCode.tlsHandshake.isSendable)
        #expect(!WebSocketCloseCode(1004).isSendable)
        #expect(!WebSocketCloseCode(2999).isValidOnWire)
        #expect(WebSocketCloseCode(3000).isLibrary && WebSocketCloseCode(3000).isSendable)
        #expect(WebSocketCloseCode.application(4000)?.isApplication == true)
        #expect(WebSocketCloseCode.application(4999) != nil)
        #expect(WebSocketCloseCode.application(3999) == nil)
        #expect(WebSocketCloseCode.application(5000) == nil)
        #expect(WebSocketCloseCode.goingAway.description == "1001 (Going Away)")
        #expect(WebSocketCloseCode(4321).description == "4321 (application)")
    }

    @Test("close codes encode as plain numbers")
    func codable() throws {
        let data = try JSONEncoder().encode([WebSocketCloseCode.protocolError])
        #expect(String(decoding: data, as: UTF8.self) == "[1002]")
        #expect(try JSONDecoder().decode([WebSocketCloseCode].self, from: data) == [.protocolError])
    }
}
