import DuplexSchema
import Foundation
import Testing

@testable import DuplexRecordReplay

/// How a replay compares a client's message with the recorded one, and which session a
/// connection gets.
@Suite("ReplayMatcher and ReplayBook")
struct ReplayMatcherTests {
    @Test("exact compares text and bytes; JSON ignores the named fields at every depth; a regular expression must match the whole text")
    func matchers() {
        #expect(ReplayMatcher.exact.matches(.text("a"), .text("a")))
        #expect(!ReplayMatcher.exact.matches(.text("a"), .text("a ")))
        #expect(!ReplayMatcher.exact.matches(.text("a"), .binary(Data("a".utf8))))
        #expect(ReplayMatcher.exact.matches(.binary(Data([1, 2])), .binary(Data([1, 2]))))

        let json = ReplayMatcher.jsonIgnoring(["at", "id"])
        #expect(
            json.matches(
                .text(#"{"type":"say","at":1,"body":{"id":7,"n":[1,{"id":2}]}}"#),
                .text(#"{ "body": {"n": [1, {"id": 9}], "id": 8}, "type": "say", "at": 99 }"#)))
        #expect(!json.matches(.text(#"{"type":"say","n":1}"#), .text(#"{"type":"say","n":2}"#)), "a field not ignored still counts")
        #expect(!json.matches(.text(#"{"type":"say"}"#), .text(#"{"type":"say","extra":true}"#)), "so does one more field")
        #expect(!json.matches(.text(#"{"ok":true}"#), .text(#"{"ok":1}"#)), "true is not 1")
        #expect(json.matches(.text("not json"), .text("not json")), "text that is not JSON is compared exactly")
        #expect(!json.matches(.text("not json"), .text("not json either")))

        let pattern = ReplayMatcher.regularExpression
        #expect(pattern.matches(.text(#"\{"type":"say","text":"[a-z]+"\}"#), .text(#"{"type":"say","text":"hello"}"#)))
        #expect(!pattern.matches(.text("hel+o"), .text("hello there")), "the whole text, not a part")
        #expect(pattern.matches(.text("(unclosed"), .text("(unclosed")), "a recorded text that is no expression is compared exactly")

        let custom = ReplayMatcher.custom { recorded, received in
            guard case .text(let a) = recorded, case .text(let b) = received else { return false }
            return a.lowercased() == b.lowercased()
        }
        #expect(custom.matches(.text("HELLO"), .text("hello")))
        #expect(!custom.matches(.text("HELLO"), .text("bye")))
    }

    @Test("the n-th connection to a path gets the n-th session recorded there, then they start over; other paths and kinds get none")
    func book() {
        let cassette = Cassette(sessions: [
            .webSocket("/a", steps: [.server(.text("a1"))]),
            .eventStream("/a", steps: []),
            .webSocket("/b", steps: []),
            .webSocket("/a", steps: [.server(.text("a2"))]),
        ])
        let book = ReplayBook(ReplayConfiguration(cassette: cassette))
        #expect(book.paths(.webSocket) == ["/a", "/b"])
        #expect(book.paths(.eventStream) == ["/a"])
        #expect(book.take(.webSocket, path: "/a")?.number == 1)
        #expect(book.take(.webSocket, path: "/a")?.number == 4)
        #expect(book.take(.webSocket, path: "/a")?.number == 1)
        #expect(book.take(.eventStream, path: "/a")?.number == 2)
        #expect(book.take(.webSocket, path: "/c")?.number == nil)
        #expect(book.take(.eventStream, path: "/b")?.number == nil)
    }

    @Test("a speed divides the recorded delays, infinity makes them none, and nothing waits beyond a year")
    func speeds() {
        let cassette = Cassette()
        #expect(ReplayConfiguration(cassette: cassette, speed: 1).scaled(.milliseconds(300)) == .milliseconds(300))
        #expect(ReplayConfiguration(cassette: cassette, speed: 2).scaled(.milliseconds(300)) == .milliseconds(150))
        #expect(ReplayConfiguration(cassette: cassette, speed: .infinity).scaled(.seconds(5)) == .zero)
        #expect(ReplayConfiguration(cassette: cassette, speed: 1e-300).scaled(.seconds(1)) == .seconds(366 * 86_400))
    }
}
