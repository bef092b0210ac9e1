import DuplexSchema
import Testing

@Suite("ServerSentEvent encoding")
struct ServerSentEventTests {
    @Test("fields encode in the text/event-stream format, ending with a blank line")
    func encodesFields() throws {
        let event = ServerSentEvent(id: "42", event: "tick", data: "hello", retry: 2000)
        #expect(try event.encoded() == "id: 42\nevent: tick\nretry: 2000\ndata: hello\n\n")
        #expect(try ServerSentEvent(data: "").encoded() == "data\n\n")
    }

    @Test("multi-line data becomes several data lines; CRLF, CR and LF all split")
    func multiLineData() throws {
        #expect(try ServerSentEvent(data: "a\nb\r\nc\rd").encoded() == "data: a\ndata: b\ndata: c\ndata: d\n\n")
        #expect(try ServerSentEvent(data: "trailing\n").encoded() == "data: trailing\ndata\n\n")
        #expect(try ServerSentEvent(data: " lead").encoded() == "data:  lead\n\n", "a leading space survives the one the parser strips")
    }

    @Test("ids and event names with CR, LF or NUL are rejected, as is a negative retry")
    func rejectsBadFields() {
        for bad in ["a\nb", "a\rb", "a\u{0}b"] {
            #expect(throws: ServerSentEventError.self) { try ServerSentEvent(id: bad, data: "x").encoded() }
            #expect(throws: ServerSentEventError.self) { try ServerSentEvent(event: bad, data: "x").encoded() }
        }
        #expect(throws: ServerSentEventError.self) { try ServerSentEvent(data: "x", retry: -1).encoded() }
    }

    @Test("encoded events parse back to the same events")
    func roundTrip() throws {
        let events = [
            ServerSentEvent(id: "1", event: "message", data: "plain"),
            ServerSentEvent(id: "2", event: "multi", data: "line one\nline two\n\nline four"),
            ServerSentEvent(id: "3", event: "message", data: "  spaces and é ✓ \u{301} 😀", retry: 5),
            ServerSentEvent(id: "4", event: "message", data: ""),
        ]
        var parser = ServerSentEventParser()
        var parsed: [ServerSentEvent] = []
        for event in events {
            parsed += try parser.parse(Array(try event.encoded().utf8))
        }
        #expect(parsed == events)
    }

    @Test("comments and retry directives are ignored as events by a parser")
    func commentsAndRetry() throws {
        #expect(ServerSentEvent.comment("heartbeat") == ": heartbeat\n")
        #expect(ServerSentEvent.comment("two\nlines") == ": two\n: lines\n")
        var parser = ServerSentEventParser()
        let events = try parser.parse(Array((ServerSentEvent.comment("x") + ServerSentEvent.retryDirective(milliseconds: 2000)).utf8))
        #expect(events.isEmpty)
        #expect(parser.reconnectionTime == 2000)
    }
}
