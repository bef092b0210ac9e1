import DuplexSchema
import Foundation
import Testing

/// The cassette format (docs/cassettes.md): JSON lines, versioned, read with errors that name the line.
@Suite("Cassette")
struct CassetteTests {
    static let sample = Cassette(sessions: [
        Cassette.Session(
            kind: .webSocket,
            path: "/chat/lobby",
            query: "name=ann",
            headers: [.init("Host", "127.0.0.1:8080"), .init("Authorization", "[redacted]")],
            subprotocol: "duplex.chat.v1",
            extensions: "permessage-deflate",
            steps: [
                .client(.text(#"{"type":"say","text":"hi"}"#), at: .milliseconds(12)),
                .server(.text("line one\nline two"), at: .milliseconds(13)),
                .server(.binary(Data([0, 1, 2, 255])), at: .milliseconds(14)),
                Cassette.Step(at: .milliseconds(15), .pongs(false)),
                .close(code: 4000, reason: "bye", by: .server, at: .milliseconds(20)),
                .close(code: nil, by: .client, at: .milliseconds(21)),
            ]
        ),
        .eventStream(
            "/events",
            steps: [
                .event(ServerSentEvent(id: "1", event: "tick", data: "a\nb", retry: 500), at: .milliseconds(100)),
                .disconnect(by: .server, at: .seconds(2)),
            ]
        ),
        .eventStream(
            "/v1/completions",
            method: "POST",
            body: Data(#"{"prompt":"hi"}"#.utf8),
            steps: [.event(ServerSentEvent(data: "[DONE]"), at: .milliseconds(5)), .disconnect(by: .server, at: .milliseconds(6))]
        ),
        .eventStream("/upload", method: "PUT", body: Data([0xff, 0x00]), steps: []),
    ])

    @Test("a cassette written as JSON lines reads back the same, every field and step kind included")
    func roundTrip() throws {
        let text = Self.sample.encoded()
        let lines = text.split(separator: "\n")
        #expect(lines.first == #"{"duplex-cassette":1}"#)
        #expect(lines.count == 1 + 4 + 6 + 2 + 2, "a header, an open line per session, a line per step")
        #expect(lines.contains(#"{"at":0.015,"from":"server","pongs":false,"session":1}"#))
        #expect(lines.contains(#"{"open":{"body":"{\"prompt\":\"hi\"}","kind":"sse","method":"POST","path":"/v1/completions"},"session":3}"#))
        #expect(
            lines.contains(#"{"open":{"bodyBinary":"/wA=","kind":"sse","method":"PUT","path":"/upload"},"session":4}"#),
            "a body that is not UTF-8 is base64")
        #expect(lines.contains(#"{"at":0.012,"from":"client","session":1,"text":"{\"type\":\"say\",\"text\":\"hi\"}"}"#))
        #expect(lines.contains(#"{"at":0.014,"binary":"AAEC/w==","from":"server","session":1}"#))
        #expect(try Cassette(jsonLines: text) == Self.sample)
        #expect(Cassette.jsonLine(for: .disconnect(by: .client, at: .seconds(1)), session: 3) == #"{"at":1,"end":true,"from":"client","session":3}"#)
    }

    static let header = #"{"duplex-cassette":1}"# + "\n"
    /// A header, a WebSocket session's open line, then `lines`.
    static func webSocket(_ lines: String...) -> String {
        header + #"{"open":{"kind":"websocket","path":"/"},"session":1}"# + "\n" + lines.joined(separator: "\n")
    }

    /// Files the reader refuses, and the start of what it says.
    static let refusals: [(text: String, expected: String)] = [
        ("", #"line 1: not a Duplex cassette: it is empty"#),
        (#"{"open":{"kind":"websocket","path":"/"},"session":1}"#, #"line 1: not a Duplex cassette: the first line must be {"duplex-cassette":1}"#),
        (#"{"duplex-cassette":2}"#, "line 1: cassette format version 2 is not one this reads (1)"),
        (header + "not json", "line 2: not a line of the cassette format"),
        (header + #"{"at":0,"from":"client","session":1,"text":"x"}"#, "line 2: session 1 has a step before its open line"),
        (header + #"{"open":{"kind":"websocket","path":"echo"},"session":1}"#, "line 2: session 1's path must begin with / (got echo)"),
        (header + #"{"open":{"kind":"gopher","path":"/"},"session":1}"#, "line 2: not a line of the cassette format"),
        (webSocket("", #"{"open":{"kind":"sse","path":"/"},"session":1}"#), "line 4: session 1 is opened twice"),
        (webSocket(#"{"at":-1,"from":"client","session":1,"text":"x"}"#), #"line 3: a step needs "at""#),
        (webSocket(#"{"at":1e300,"from":"client","session":1,"text":"x"}"#), #"line 3: a step needs "at""#),
        (
            webSocket(#"{"at":2,"from":"client","session":1,"text":"x"}"#, #"{"at":1,"from":"server","session":1,"text":"y"}"#),
            "line 4: session 1's steps go back in time (1.0 s after 2.0 s)"
        ),
        (webSocket(#"{"at":0,"from":"client","session":1,"text":"x","binary":""}"#), #"line 3: a step has exactly one of"#),
        (webSocket(#"{"at":0,"session":1,"text":"x"}"#), #"line 3: a step needs "from""#),
        (webSocket(#"{"at":0,"event":{"data":"x"},"session":1}"#), "line 3: an SSE event belongs to an SSE session"),
        (
            header + #"{"open":{"kind":"sse","path":"/"},"session":1}"# + "\n" + #"{"at":0,"from":"server","session":1,"text":"x"}"#,
            "line 3: messages and close frames belong to a WebSocket session"
        ),
        (webSocket(#"{"at":0,"binary":"%%%","from":"server","session":1}"#), #"line 3: "binary" is not base64"#),
        (webSocket(#"{"at":0,"from":"client","pongs":false,"session":1}"#), #"line 3: "pongs" is a WebSocket session's step, from the server"#),
        (header + #"{"open":{"kind":"websocket","method":"POST","path":"/"},"session":1}"#, #"line 2: "method" and "body" belong to an SSE session"#),
        (header + #"{"open":{"kind":"sse","method":"PO ST","path":"/"},"session":1}"#, #"line 2: session 1's method "PO ST" is not an HTTP token"#),
        (
            header + #"{"open":{"body":"a","bodyBinary":"YQ==","kind":"sse","path":"/"},"session":1}"#,
            #"line 2: a session has "body" or "bodyBinary", not both"#
        ),
        (header + #"{"open":{"bodyBinary":"%%","kind":"sse","path":"/"},"session":1}"#, #"line 2: "bodyBinary" is not base64"#),
    ]

    @Test("a file that is not a cassette, or a line the format does not have, is refused with its line and why", arguments: refusals)
    func refused(text: String, expected: String) {
        #expect {
            try Cassette(jsonLines: text)
        } throws: { error in
            "\(error)".hasPrefix("cassette \(expected)")
        }
    }

    @Test("CRLF line ends and blank lines are read")
    func lineEnds() throws {
        let text = Self.sample.encoded().replacingOccurrences(of: "\n", with: "\r\n\r\n")
        #expect(try Cassette(jsonLines: text) == Self.sample)
    }
}
