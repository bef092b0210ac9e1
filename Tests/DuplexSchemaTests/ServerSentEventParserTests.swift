import DuplexSchema
import Testing

/// Conformance of ``ServerSentEventParser`` to the WHATWG HTML Standard, section 9.2.5
/// "Parsing an event stream" and section 9.2.6 "Interpreting an event stream"
/// (https://html.spec.whatwg.org/multipage/server-sent-events.html).
@Suite("ServerSentEventParser: WHATWG HTML 9.2.5-9.2.6")
struct ServerSentEventParserTests {
    /// Parses `stream` in one chunk.
    func parse(_ stream: [UInt8], lastEventID: String = "") throws -> (events: [ServerSentEvent], parser: ServerSentEventParser) {
        var parser = ServerSentEventParser(lastEventID: lastEventID)
        let events = try parser.parse(stream)
        return (events, parser)
    }

    func parse(_ stream: String) throws -> [ServerSentEvent] {
        try parse(Array(stream.utf8)).events
    }

    /// Parses `stream` split at every possible pair of points, and checks every split gives
    /// the same events as the whole: the parser must not depend on chunk boundaries.
    func expectSplitInvariant(_ stream: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) throws {
        let whole = try parse(stream).events
        for first in 0...stream.count {
            for second in first...stream.count {
                var parser = ServerSentEventParser()
                var events = try parser.parse(stream[0..<first])
                events += try parser.parse(stream[first..<second])
                events += try parser.parse(stream[second...])
                #expect(events == whole, "split at \(first), \(second)", sourceLocation: sourceLocation)
            }
        }
    }

    // MARK: 9.2.5: line endings, BOM, UTF-8

    @Test("9.2.5: lines may end in LF, CR or CRLF")
    func lineEndings() throws {
        for end in ["\n", "\r", "\r\n"] {
            let events = try parse("data: a\(end)data: b\(end)\(end)data: c\(end)\(end)")
            #expect(events.map(\.data) == ["a\nb", "c"], "line end \(end.debugDescription)")
        }
    }

    @Test("9.2.5: a CRLF split across two chunks is one line end, not a CR and an empty line")
    func crlfSplitAcrossChunks() throws {
        var parser = ServerSentEventParser()
        var events = try parser.parse(Array("data: a\r".utf8))
        events += try parser.parse(Array("\ndata: b\r".utf8))
        events += try parser.parse(Array("\n\r".utf8))
        events += try parser.parse(Array("\n".utf8))
        #expect(events.map(\.data) == ["a\nb"])
    }

    @Test("9.2.5: the result does not depend on where the stream is split into chunks")
    func chunkSplitInvariance() throws {
        try expectSplitInvariant(Array("\u{FEFF}: c\r\nid: 1\revent: e\ndata: x\r\n\r\ndata:\u{301}é\r\r".utf8))
        try expectSplitInvariant(Array("retry: 10\nid: \u{0}\ndata\ndata: two\n\ndata: end\n".utf8))
    }

    @Test("9.2.5: one leading BOM is skipped, even split across chunks; a later one is data")
    func byteOrderMark() throws {
        #expect(try parse("\u{FEFF}data: a\n\n").map(\.data) == ["a"])
        #expect(try parse("\u{FEFF}\u{FEFF}data: a\n\n").isEmpty, "a second BOM makes the field name \\u{FEFF}data")
        #expect(try parse("data: \u{FEFF}a\n\n").map(\.data) == ["\u{FEFF}a"])
        var parser = ServerSentEventParser()
        var events = try parser.parse([0xEF])
        events += try parser.parse([0xBB])
        events += try parser.parse([0xBF] + Array("data: split\n\n".utf8))
        #expect(events.map(\.data) == ["split"])
        // bytes that start like a BOM but are not one are kept
        #expect(try parse([0xEF, 0xBB] + Array("x\n\n".utf8)).events.isEmpty)
        var held = ServerSentEventParser()
        var heldEvents = try held.parse(Array("data: \u{FEFF}".utf8))
        heldEvents += try held.parse(Array("\n\n".utf8))
        #expect(heldEvents.map(\.data) == ["\u{FEFF}"])
    }

    @Test("9.2.5: each line is decoded as UTF-8 by itself, invalid bytes become U+FFFD")
    func utf8Decoding() throws {
        let events = try parse(Array("data: a".utf8) + [0xFF, 0xC3] + Array("\ndata: \u{1F600}\n\n".utf8)).events
        #expect(events.map(\.data) == ["a\u{FFFD}\u{FFFD}\n\u{1F600}"])
    }

    @Test("9.2.5: lines are split on bytes, so a combining mark after the colon survives")
    func combiningMarkAfterColon() throws {
        // ":" followed by U+0301 is one Swift Character; splitting on Characters would lose the field.
        #expect(try parse("data:\u{301}x\n\n").map(\.data) == ["\u{301}x"])
        #expect(try parse("data: \u{301}\n\n").map(\.data) == ["\u{301}"])
        #expect(try parse("event:\u{301}\ndata: d\n\n").map(\.event) == ["\u{301}"])
    }

    // MARK: 9.2.6: lines and fields

    @Test("9.2.6: a line starting with a colon is a comment and is ignored")
    func comments() throws {
        #expect(try parse(": hello\n:\ndata: a\n: between\n\n").map(\.data) == ["a"])
        #expect(try parse(": only comments\n\n").isEmpty)
    }

    @Test("9.2.6: a line with no colon is a field whose value is the empty string")
    func fieldWithoutColon() throws {
        #expect(try parse("data\n\n").map(\.data) == [""])
        let (events, parser) = try parse(Array("id: 5\ndata: x\n\nid\ndata: y\n\n".utf8))
        #expect(events.map(\.id) == ["5", nil])
        #expect(parser.lastEventID == "")
    }

    @Test("9.2.6: exactly one space after the colon is removed")
    func leadingSpace() throws {
        #expect(try parse("data:a\n\ndata: a\n\ndata:  a\n\ndata:\ta\n\n").map(\.data) == ["a", "a", " a", "\ta"])
    }

    @Test("9.2.6: fields with other names are ignored")
    func unknownFields() throws {
        let events = try parse("foo: bar\nDATA: upper\ndata: kept\n\n")
        #expect(events.map(\.data) == ["kept"])
    }

    @Test("9.2.6: several data lines join with LF; empty data lines count")
    func dataLines() throws {
        #expect(try parse("data: YHOO\ndata: +2\ndata: 10\n\n").map(\.data) == ["YHOO\n+2\n10"])
        #expect(try parse("data\ndata\n\n").map(\.data) == ["\n"])
        #expect(try parse("data:\n\n").map(\.data) == [""])
    }

    @Test("9.2.6 example: data, data/data, then an unterminated data: gives two events")
    func specExampleEmptyData() throws {
        let events = try parse("data\n\ndata\ndata\n\ndata:")
        #expect(events.map(\.data) == ["", "\n"])
    }

    @Test("9.2.6 example: data:test and data: test are the same event")
    func specExampleSpace() throws {
        #expect(try parse("data:test\n\ndata: test\n\n").map(\.data) == ["test", "test"])
    }

    @Test("9.2.6 example: ids carry over, an empty id resets, a double space keeps one")
    func specExampleIDs() throws {
        let events = try parse(": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n")
        #expect(events.map(\.data) == ["first event", "second event", " third event"])
        #expect(events.map(\.id) == ["1", nil, nil])
    }

    // MARK: 9.2.6: the event type, id and retry

    @Test("9.2.6: an event with no type is a message; the type does not carry over")
    func eventType() throws {
        let events = try parse("event: add\ndata: 1\n\ndata: 2\n\nevent\ndata: 3\n\n")
        #expect(events.map(\.event) == ["add", "message", "message"])
    }

    @Test("9.2.6: the last event id is committed at dispatch, not at the id line")
    func lastEventIDCommittedAtDispatch() throws {
        var parser = ServerSentEventParser(lastEventID: "0")
        _ = try parser.parse(Array("id: 7\ndata: x\n".utf8))
        #expect(parser.lastEventID == "0", "no blank line yet: nothing is committed")
        _ = try parser.parse(Array("\n".utf8))
        #expect(parser.lastEventID == "7")
        // a block with an id and no data dispatches nothing but still commits the id
        let events = try parser.parse(Array("id: 8\n\n".utf8))
        #expect(events.isEmpty && parser.lastEventID == "8")
        // later events carry the last id
        #expect(try parser.parse(Array("data: y\n\n".utf8)).map(\.id) == ["8"])
    }

    @Test("9.2.6: an id containing NUL is ignored")
    func idWithNul() throws {
        let (events, parser) = try parse(Array("id: 1\ndata: a\n\nid: 2\u{0}3\ndata: b\n\n".utf8))
        #expect(events.map(\.id) == ["1", "1"])
        #expect(parser.lastEventID == "1")
    }

    @Test("9.2.6: retry with only ASCII digits sets the reconnection time; anything else is ignored")
    func retry() throws {
        let (events, parser) = try parse(
            Array("retry: 1500\ndata: a\n\nretry: 2x\ndata: b\n\nretry: -1\nretry:  30\nretry:\nretry: ３\ndata: c\n\n".utf8))
        #expect(events.map(\.retry) == [1500, nil, nil])
        #expect(parser.reconnectionTime == 1500)
        var alone = ServerSentEventParser()
        #expect(try alone.parse(Array("retry: 2000\n\n".utf8)).isEmpty)
        #expect(alone.reconnectionTime == 2000, "a retry-only block sets the time without an event")
        var huge = ServerSentEventParser()
        _ = try huge.parse(Array("retry: 99999999999999999999999\n\n".utf8))
        #expect(huge.reconnectionTime == nil, "a value that overflows is ignored")
    }

    // MARK: end of stream and reconnection

    @Test("9.2.6: an event unterminated at the end of the stream is not dispatched")
    func unterminatedEventAtEnd() throws {
        var parser = ServerSentEventParser()
        #expect(try parser.parse(Array("data: complete\n\ndata: partial\n".utf8)).map(\.data) == ["complete"])
        parser.finish()
        // nothing of the dropped stream carries into the next one
        #expect(try parser.parse(Array("data: next\n\n".utf8)).map(\.data) == ["next"])
    }

    @Test("finish() drops a partial line and event but keeps the last id and retry")
    func finishKeepsIDAndRetry() throws {
        var parser = ServerSentEventParser()
        _ = try parser.parse(Array("retry: 300\nid: 4\ndata: a\n\nid: 5\nevent: half\ndata: par".utf8))
        parser.finish()
        #expect(parser.lastEventID == "4")
        #expect(parser.reconnectionTime == 300)
        let events = try parser.parse(Array("tial\n\n".utf8))
        #expect(events.isEmpty, "the half line of the dropped stream became the field name 'tial'")
        parser.finish()
        let next = try parser.parse(Array("\u{FEFF}data: b\n\n".utf8))
        #expect(next == [ServerSentEvent(id: "4", event: "message", data: "b")], "a new stream may start with a BOM")
    }

    // MARK: limits

    @Test("a line or an event over the limit throws eventTooLarge instead of growing")
    func limits() throws {
        var parser = ServerSentEventParser(configuration: .init(maxEventBytes: 16))
        #expect(throws: ServerSentEventError.self) {
            _ = try parser.parse(Array("data: 0123456789abcdef".utf8))
        }
        var dataParser = ServerSentEventParser(configuration: .init(maxEventBytes: 16))
        do {
            _ = try dataParser.parse(Array("data: 01234567\ndata: 01234567\n".utf8))
            Issue.record("expected eventTooLarge")
        } catch {
            #expect(error.code == .eventTooLarge)
        }
        // after the error the parser is usable again
        #expect(try dataParser.parse(Array("data: ok\n\n".utf8)).map(\.data) == ["ok"])
    }
}
