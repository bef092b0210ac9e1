#if DEBUG
import DuplexSchema

/// `ServerSentEventParser` against the WHATWG algorithm ("Interpreting an event stream",
/// written below the way the standard states it: decode the whole stream, split it into lines,
/// process each), fed the same bytes in chunks the input chooses.
enum SSEParserFuzz {
    static let target = FuzzTarget(
        name: "sse",
        properties:
            "no crash; the events, last event id and retry equal the WHATWG algorithm's for the same bytes, however they are chunked; a parser with a small limit throws eventTooLarge instead of growing, and recovers"
    ) { bytes in
        var input = FuzzInput(bytes)
        let chunkCount = Int(input.byte() % 8)
        let stream = input.rest()
        let expected = WHATWGEventStream.parse(stream)

        var parser = ServerSentEventParser()
        var events: [ServerSentEvent] = []
        var chunker = FuzzInput(bytes)
        for chunk in chunker.chunks(of: stream, count: chunkCount) {
            do {
                events += try parser.parse(chunk)
            } catch {
                require(false, "a 16 MiB limit was hit by \(stream.count) bytes: \(error)")
            }
        }
        parser.finish()
        require(events == expected.events, "events differ from the WHATWG algorithm's:\n  parser \(events)\n  WHATWG \(expected.events)")
        require(
            parser.lastEventID == expected.lastEventID,
            "last event id \(parser.lastEventID.debugDescription), WHATWG \(expected.lastEventID.debugDescription)")
        require(
            parser.reconnectionTime == expected.reconnectionTime,
            "retry \(String(describing: parser.reconnectionTime)), WHATWG \(String(describing: expected.reconnectionTime))")

        // A small limit: throws rather than holding more, and parses a new stream afterwards.
        var small = ServerSentEventParser(configuration: .init(maxEventBytes: 32))
        for chunk in chunker.chunks(of: stream, count: chunkCount) {
            do throws(ServerSentEventError) { _ = try small.parse(chunk) } catch {
                require(error.code == .eventTooLarge, "unexpected error \(error)")
            }
        }
        small.finish()
        let after = try? small.parse(Array("data: ok\n\n".utf8))
        require(after?.last?.data == "ok", "the parser did not recover after finish(): \(String(describing: after))")
    }
}

/// The WHATWG HTML Standard's event stream interpretation, step by step, on a whole stream:
/// the reference the incremental parser must agree with.
enum WHATWGEventStream {
    struct Result {
        var events: [ServerSentEvent] = []
        var lastEventID = ""
        var reconnectionTime: Int?
    }

    static func parse(_ bytes: [UInt8]) -> Result {
        // "UTF-8 decode": invalid sequences become U+FFFD, and one leading BOM is removed.
        var scalars = Array(String(decoding: bytes, as: UTF8.self).unicodeScalars)
        if scalars.first == "\u{FEFF}" { scalars.removeFirst() }
        // Lines end in CRLF, LF or CR; a last line with no end is not a line (the incomplete
        // event at the end of the stream is not dispatched).
        var lines: [[Unicode.Scalar]] = []
        var current: [Unicode.Scalar] = []
        var index = 0
        while index < scalars.count {
            let scalar = scalars[index]
            if scalar == "\r" || scalar == "\n" {
                lines.append(current)
                current = []
                if scalar == "\r", index + 1 < scalars.count, scalars[index + 1] == "\n" { index += 1 }
            } else {
                current.append(scalar)
            }
            index += 1
        }
        var result = Result()
        var data = ""
        var eventType = ""
        var idBuffer = ""
        var retryInEvent: Int?
        for line in lines {
            if line.isEmpty {
                // Dispatch.
                result.lastEventID = idBuffer
                defer { data = ""; eventType = ""; retryInEvent = nil }
                if data.isEmpty { continue }
                if data.hasSuffix("\n") { data.removeLast() }
                result.events.append(
                    ServerSentEvent(
                        id: idBuffer.isEmpty ? nil : idBuffer,
                        event: eventType.isEmpty ? "message" : eventType,
                        data: data,
                        retry: retryInEvent
                    ))
                continue
            }
            if line.first == ":" { continue }
            var field = String(String.UnicodeScalarView(line))
            var value = ""
            if let colon = line.firstIndex(of: ":") {
                field = String(String.UnicodeScalarView(line[..<colon]))
                var valueScalars = line[(colon + 1)...]
                if valueScalars.first == " " { valueScalars = valueScalars.dropFirst() }
                value = String(String.UnicodeScalarView(valueScalars))
            }
            switch field {
            case "event":
                eventType = value
            case "data":
                data += value + "\n"
            case "id":
                if !value.unicodeScalars.contains("\0") { idBuffer = value }
            case "retry":
                // "If the field value consists of only ASCII digits": base ten. A value too
                // large for an Int is ignored (the standard's integers have no bound; ours do).
                if !value.isEmpty, value.unicodeScalars.allSatisfy({ ("0"..."9").contains($0) }), let time = Int(value) {
                    result.reconnectionTime = time
                    retryInEvent = time
                }
            default:
                break
            }
        }
        return result
    }
}
#endif
