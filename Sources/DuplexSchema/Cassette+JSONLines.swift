import Foundation

/// The cassette file format, version 1: JSON lines (`docs/cassettes.md`).
///
/// ```text
/// {"duplex-cassette":1}
/// {"open":{"kind":"websocket","path":"/echo","headers":[["Host","127.0.0.1:8080"]]},"session":1}
/// {"at":0.0012,"from":"client","session":1,"text":"hello"}
/// {"at":0.0013,"from":"server","session":1,"text":"hello"}
/// {"at":0.004,"close":{"code":1000,"reason":""},"from":"client","session":1}
/// ```
extension Cassette {
    /// The longest time into a session a step may be at: a year.
    static let maxSeconds: Double = 366 * 86_400

    /// One line of the file.
    struct Line: Codable {
        var version: Int?
        var session: Int?
        var open: Open?
        var at: Double?
        var from: Side?
        var text: String?
        var binary: String?
        var event: ServerSentEvent?
        var close: Close?
        var end: Bool?
        var pongs: Bool?

        enum CodingKeys: String, CodingKey {
            case version = "duplex-cassette"
            case session, open, at, from, text, binary, event, close, end, pongs
        }
    }

    struct Open: Codable {
        var kind: Session.Kind
        var path: String
        var query: String?
        var headers: [[String]]?
        var subprotocol: String?
        var extensions: String?
        /// An SSE request's method when not GET.
        var method: String?
        /// An SSE request's body: as text when it is UTF-8, else base64 in `bodyBinary`.
        var body: String?
        var bodyBinary: String?
    }

    struct Close: Codable {
        var code: UInt16?
        var reason: String?
    }

    /// The cassette as JSON lines: a header line, then each session's opening line and its
    /// steps' lines, session after session. Sessions are numbered from 1 in order.
    public func encoded() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var lines = [Self.headerLine]
        for (index, session) in sessions.enumerated() {
            let number = index + 1
            lines.append(Self.json(Self.openLine(for: session, number: number), encoder))
            for step in session.steps {
                lines.append(Self.json(Self.line(for: step, session: number), encoder))
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// The first line of a cassette: `{"duplex-cassette":1}`.
    public static let headerLine = #"{"duplex-cassette":\#(formatVersion)}"#

    /// The line that opens session `number` (without its steps).
    static func openLine(for session: Session, number: Int) -> Line {
        let open = Open(
            kind: session.kind,
            path: session.path,
            query: session.query,
            headers: session.headers.isEmpty ? nil : session.headers.map { [$0.name, $0.value] },
            subprotocol: session.subprotocol,
            extensions: session.extensions,
            method: session.method,
            body: session.body.flatMap { String(validating: $0, as: UTF8.self) },
            bodyBinary: session.body.flatMap { String(validating: $0, as: UTF8.self) == nil ? $0.base64EncodedString() : nil }
        )
        return Line(session: number, open: open)
    }

    /// The line that opens `session` as number `number`, without its newline and without its
    /// steps: what a recorder appends when a session begins.
    public static func jsonLine(opening session: Session, number: Int) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return json(openLine(for: session, number: number), encoder)
    }

    /// One step's line.
    static func line(for step: Step, session: Int) -> Line {
        var line = Line(session: session, at: seconds(step.at))
        switch step.action {
        case .message(let side, .text(let text)):
            line.from = side
            line.text = text
        case .message(let side, .binary(let data)):
            line.from = side
            line.binary = data.base64EncodedString()
        case .event(let event):
            line.from = .server
            line.event = event
        case .close(let side, let code, let reason):
            line.from = side
            line.close = Close(code: code, reason: reason)
        case .disconnect(let side):
            line.from = side
            line.end = true
        case .pongs(let answers):
            line.from = .server
            line.pongs = answers
        }
        return line
    }

    /// One step as the line the format gives it, without its newline: what a recorder appends.
    public static func jsonLine(for step: Step, session: Int) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return json(line(for: step, session: session), encoder)
    }

    private static func json(_ line: Line, _ encoder: JSONEncoder) -> String {
        // A Line holds strings, numbers and Data only: encoding it cannot fail.
        (try? encoder.encode(line)).map { String(decoding: $0, as: UTF8.self) } ?? "{}"
    }

    /// A duration in seconds, to the microsecond: what a line holds.
    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + (Double(attoseconds) / 1e12).rounded() / 1e6
    }

    /// Reads a cassette written in JSON lines (``encoded()``, or by `duplex record`).
    /// - Throws: ``FormatError`` naming the line: not a cassette or another version, a line
    ///   that is not JSON or not one of the format's, a step of a session that was not opened,
    ///   a time that is negative, goes back, or is beyond a year, a step of the wrong kind for
    ///   its session (an SSE event in a WebSocket session), or bad base64.
    public init(jsonLines text: String) throws(FormatError) {
        let decoder = JSONDecoder()
        var sessions: [Session] = []
        var numbers: [Int: Int] = [:]
        var sawHeader = false
        var lineNumber = 0
        // CRLF is one Character in Swift: a line ends at either.
        for content in text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" }) {
            lineNumber += 1
            guard !content.allSatisfy({ $0 == " " || $0 == "\t" }) else { continue }
            let line: Line
            do {
                line = try decoder.decode(Line.self, from: Data(content.utf8))
            } catch {
                throw FormatError(line: lineNumber, "not a line of the cassette format (\(Self.reason(error)))")
            }
            guard sawHeader else {
                guard let version = line.version else {
                    throw FormatError(line: lineNumber, #"not a Duplex cassette: the first line must be {"duplex-cassette":1}"#)
                }
                guard version == Self.formatVersion else {
                    throw FormatError(line: lineNumber, "cassette format version \(version) is not one this reads (\(Self.formatVersion))")
                }
                sawHeader = true
                continue
            }
            guard let number = line.session, number >= 1 else {
                throw FormatError(line: lineNumber, #"a line needs "session": a number from 1"#)
            }
            if let open = line.open {
                guard numbers[number] == nil else {
                    throw FormatError(line: lineNumber, "session \(number) is opened twice")
                }
                guard open.path.hasPrefix("/") else {
                    throw FormatError(line: lineNumber, "session \(number)'s path must begin with / (got \(open.path))")
                }
                var headers: [Header] = []
                for pair in open.headers ?? [] {
                    guard pair.count == 2 else {
                        throw FormatError(line: lineNumber, "a header is a [name, value] pair (got \(pair.count) strings)")
                    }
                    headers.append(Header(pair[0], pair[1]))
                }
                let body = try Self.body(of: open, session: number, lineNumber: lineNumber)
                numbers[number] = sessions.count
                sessions.append(
                    Session(
                        kind: open.kind,
                        path: open.path,
                        query: open.query,
                        headers: headers,
                        subprotocol: open.subprotocol,
                        extensions: open.extensions,
                        method: open.method,
                        body: body
                    )
                )
                continue
            }
            guard let index = numbers[number] else {
                throw FormatError(line: lineNumber, "session \(number) has a step before its open line")
            }
            let step = try Self.step(line, session: sessions[index], number: number, lineNumber: lineNumber)
            sessions[index].steps.append(step)
        }
        guard sawHeader else {
            throw FormatError(line: max(lineNumber, 1), #"not a Duplex cassette: it is empty (the first line must be {"duplex-cassette":1})"#)
        }
        self.init(sessions: sessions)
    }

    /// An open line's request method and body, checked: only an SSE session has them, the
    /// method is an HTTP token, and the body is text or base64, not both.
    private static func body(of open: Open, session number: Int, lineNumber: Int) throws(FormatError) -> Data? {
        if open.method != nil || open.body != nil || open.bodyBinary != nil {
            guard open.kind == .eventStream else {
                throw FormatError(line: lineNumber, #""method" and "body" belong to an SSE session (session \#(number) is websocket)"#)
            }
        }
        if let method = open.method {
            guard HTTPToken.isToken(method) else {
                throw FormatError(line: lineNumber, "session \(number)'s method \(String(method.prefix(40)).debugDescription) is not an HTTP token")
            }
        }
        switch (open.body, open.bodyBinary) {
        case (nil, nil): return nil
        case (let text?, nil): return Data(text.utf8)
        case (nil, let base64?):
            guard let data = Data(base64Encoded: base64) else { throw FormatError(line: lineNumber, #""bodyBinary" is not base64"#) }
            return data
        case (_?, _?): throw FormatError(line: lineNumber, #"a session has "body" or "bodyBinary", not both"#)
        }
    }

    /// A step line, checked against its session.
    private static func step(_ line: Line, session: Session, number: Int, lineNumber: Int) throws(FormatError) -> Step {
        guard let at = line.at, at.isFinite, at >= 0, at <= maxSeconds else {
            throw FormatError(line: lineNumber, #"a step needs "at": seconds since its session began, from 0 to a year"#)
        }
        if let last = session.steps.last, seconds(last.at) > at {
            throw FormatError(line: lineNumber, "session \(number)'s steps go back in time (\(at) s after \(seconds(last.at)) s)")
        }
        let kinds = [line.text != nil, line.binary != nil, line.event != nil, line.close != nil, line.end == true, line.pongs != nil]
            .filter { $0 }.count
        guard kinds == 1 else {
            throw FormatError(line: lineNumber, #"a step has exactly one of "text", "binary", "event", "close", "end": true or "pongs""#)
        }
        guard let side = line.from ?? (line.event != nil ? .server : nil) else {
            throw FormatError(line: lineNumber, #"a step needs "from": "client" or "server""#)
        }
        let action: Step.Action
        if let pongs = line.pongs {
            guard session.kind == .webSocket, side == .server else {
                throw FormatError(
                    line: lineNumber, #""pongs" is a WebSocket session's step, from the server (session \#(number) is \#(session.kind.rawValue))"#)
            }
            action = .pongs(pongs)
        } else if let event = line.event {
            guard session.kind == .eventStream, side == .server else {
                throw FormatError(
                    line: lineNumber, "an SSE event belongs to an SSE session, from the server (session \(number) is \(session.kind.rawValue))")
            }
            action = .event(event)
        } else if line.end == true {
            action = .disconnect(side)
        } else {
            guard session.kind == .webSocket else {
                throw FormatError(line: lineNumber, "messages and close frames belong to a WebSocket session (session \(number) is sse)")
            }
            if let text = line.text {
                action = .message(side, .text(text))
            } else if let base64 = line.binary {
                guard let data = Data(base64Encoded: base64) else {
                    throw FormatError(line: lineNumber, #""binary" is not base64"#)
                }
                action = .message(side, .binary(data))
            } else {
                let close = line.close ?? Close()
                action = .close(side, code: close.code, reason: close.reason ?? "")
            }
        }
        return Step(at: .seconds(at), action)
    }

    private static func reason(_ error: any Error) -> String {
        switch error {
        case DecodingError.dataCorrupted(let context): context.debugDescription
        case DecodingError.typeMismatch(_, let context), DecodingError.valueNotFound(_, let context):
            "\(context.codingPath.map(\.stringValue).joined(separator: ".")): \(context.debugDescription)"
        case DecodingError.keyNotFound(let key, let context):
            "\((context.codingPath + [key]).map(\.stringValue).joined(separator: ".")) is missing"
        default: "\(error)"
        }
    }
}
