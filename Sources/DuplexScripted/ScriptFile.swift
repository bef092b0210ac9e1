import Duplex
import DuplexHost
import DuplexSchema
public import Foundation

/// Scripted routes from a JSON file, as `duplex-server --script FILE` reads it. The format is
/// documented in `docs/scripts.md`:
///
/// ```json
/// {"routes": [
///   {"path": "/feed", "websocket": {"onConnect": [{"send": "hello"}],
///                                   "onMessage": [{"match": {"text": "bye"}, "do": [{"close": 4001}]}]}},
///   {"path": "/orders", "sse": {"events": [{"id": "1", "data": "a"}], "everyMs": 50, "then": "drop"}}
/// ]}
/// ```
///
/// A file that cannot be used is refused whole, with where and why
/// (`routes[1].websocket.onMessage[0].match: unknown key "jsn"`): unknown keys, wrong types,
/// values out of range and missing members are all errors, never ignored.
public enum ScriptFile {
    /// The routes of the script at `path`.
    /// - Throws: ``ScriptError`` naming the file when it cannot be read, or the place in it
    ///   that is wrong.
    public static func load(path: String) throws(ScriptError) -> [ScriptedRoute] {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ScriptError(path: "", "cannot read \(path): \((error as NSError).localizedDescription)")
        }
        do {
            return try routes(from: data)
        } catch {
            throw ScriptError(path: error.path, "\(error.reason) (in \(path))")
        }
    }

    /// The routes of a script.
    public static func routes(from data: Data) throws(ScriptError) -> [ScriptedRoute] {
        let root: JSONValue
        do {
            root = try JSONDecoder().decode(JSONValue.self, from: data)
        } catch {
            throw ScriptError(path: "", Self.notJSON(data, error))
        }
        let top = try Reader(root, at: "").object(keys: ["routes"])
        guard let routes = top["routes"] else { throw ScriptError(path: "", #"a script is an object with "routes", an array"#) }
        return try routes.array().enumerated().map { index, route throws(ScriptError) in try Self.route(route, index: index) }
    }

    /// Faults on sends as a script's `faults` object writes them, such as
    /// `{"dropAfterSending": 3, "delaySendsMs": 50}` (`duplex-server --echo-faults`).
    public static func faults(from json: String) throws(ScriptError) -> WebSocketFaults {
        let value: JSONValue
        do {
            value = try JSONDecoder().decode(JSONValue.self, from: Data(json.utf8))
        } catch {
            throw ScriptError(path: "", Self.notJSON(Data(json.utf8), error))
        }
        return try faults(Reader(value, at: ""))
    }

    private static func route(_ value: Reader, index: Int) throws(ScriptError) -> ScriptedRoute {
        let members = try value.object(keys: ["path", "method"] + kindKeys)
        guard let pathValue = members["path"] else { throw value.error(#"a route needs a "path""#) }
        let path = try pathValue.string()
        guard path.hasPrefix("/") else { throw pathValue.error("a path starts with / (got \(path.debugDescription))") }
        let method = try members["method"]?.string().uppercased() ?? "GET"
        let kinds = kindKeys.filter { members[$0] != nil }
        guard kinds.count == 1, let kind = kinds.first, let script = members[kind] else {
            let known = kindKeys.map { #""\#($0)""# }.joined(separator: ", ")
            throw value.error(kinds.isEmpty ? "a route needs one of \(known)" : "a route has one of \(known) (got \(kinds.joined(separator: ", ")))")
        }
        switch kind {
        case "proxy":
            let proxy = try self.proxy(script)
            if proxy.isEventStream { return .proxy(path, method: method, script: proxy) }
            guard method == "GET" else { throw members["method"]!.error("a WebSocket proxy route's method is GET") }
            return .proxy(path, script: proxy)
        case "sse":
            let (sse, refuse) = try self.sse(script)
            return .sse(path, method: method, script: sse, refuse: refuse)
        default:
            guard method == "GET" else { throw members["method"]!.error("a WebSocket route's method is GET") }
            if kind == "websocket" { return .webSocket(path, script: try webSocket(script)) }
            return try preset(kind, script, path: path)
        }
    }

    /// The keys that say what a route is, one to a route.
    private static let kindKeys = ["websocket", "sse", "proxy"] + presetKeys

    private static func webSocket(_ value: Reader) throws(ScriptError) -> WebSocketScript {
        let members = try value.object(keys: ["subprotocols", "onConnect", "onMessage", "answerPings", "pongs", "faults", "refuse"])
        var script = WebSocketScript()
        script.subprotocols = try members["subprotocols"]?.array().map { item throws(ScriptError) in try item.string() } ?? []
        script.onConnect = try members["onConnect"]?.array().map { item throws(ScriptError) in try action(item) } ?? []
        script.onMessage = try members["onMessage"]?.array().map { item throws(ScriptError) in try rule(item) } ?? []
        script.answerPings = try answerPings(members)?.bool() ?? true
        if let faults = members["faults"] { script.faults = try self.faults(faults) }
        script.refuse = try members["refuse"].map { value throws(ScriptError) in try refusal(value) }
        return script
    }

    private static func rule(_ value: Reader) throws(ScriptError) -> ScriptRule {
        let members = try value.object(keys: ["match", "do"])
        guard let match = members["match"] else { throw value.error(#"a rule needs "match""#) }
        guard let actions = members["do"] else { throw value.error(#"a rule needs "do", a list of actions"#) }
        return ScriptRule(match: try self.match(match), do: try actions.array().map { item throws(ScriptError) in try action(item) })
    }

    static func match(_ value: Reader) throws(ScriptError) -> MessageMatch {
        let members = try value.object(keys: ["text", "contains", "json", "nth", "any"])
        guard !members.isEmpty else { throw value.error(#"a match needs one of "text", "contains", "json", "nth" or "any""#) }
        var match = MessageMatch.any
        if let text = members["text"] { match = match.and(.text(try text.string())) }
        if let contains = members["contains"] { match = match.and(.contains(try contains.string())) }
        if let json = members["json"] {
            guard case .object = json.value else { throw json.error("must be an object: the members a JSON message must have") }
            match = match.and(MessageMatch(json: json.value))
        }
        if let nth = members["nth"] { match = match.and(.nth(try nth.integer(in: 1...Int(Int32.max)))) }
        if let any = members["any"], try !any.bool() { throw any.error(#""any" is true, or left out"#) }
        return match
    }

    private static let actionKeys = ["send", "sendBinary", "sendJSON", "delayMs", "close", "drop", "ping", "answerPings", "fragment", "fault"]
    /// Former names of actions, still read.
    private static let formerActionKeys = ["pongs"]

    /// `"answerPings"`, or `"pongs"`, its former name, still read; not both.
    private static func answerPings(_ members: [String: Reader]) throws(ScriptError) -> Reader? {
        if let both = members["pongs"], members["answerPings"] != nil {
            throw both.error(#""pongs" is the former name of "answerPings": give one"#)
        }
        return members["answerPings"] ?? members["pongs"]
    }

    private static func action(_ value: Reader) throws(ScriptError) -> ScriptAction {
        let members = try value.object(keys: actionKeys + formerActionKeys + ["reason", "frames"])
        let named = (actionKeys + formerActionKeys).filter { members[$0] != nil }
        guard named.count == 1, let key = named.first, let argument = members[key] else {
            throw value.error(
                "an action has exactly one of \(actionKeys.joined(separator: ", ")) (got \(named.isEmpty ? "none" : named.joined(separator: ", ")))")
        }
        if let reason = members["reason"], key != "close" { throw reason.error(#""reason" goes with "close""#) }
        if let frames = members["frames"], key != "fragment" { throw frames.error(#""frames" goes with "fragment""#) }
        switch key {
        case "send":
            return .send(try argument.string())
        case "sendBinary":
            guard let data = Data(base64Encoded: try argument.string()) else { throw argument.error("must be base64") }
            return .sendBinary(data)
        case "sendJSON":
            return .send(argument.value.jsonText)
        case "delayMs":
            return .delay(.milliseconds(try argument.integer(in: 0...86_400_000)))
        case "close":
            let (code, reason) = try closeCode(argument, reason: members["reason"])
            return .close(code: code, reason: reason)
        case "drop":
            guard try argument.bool() else { throw argument.error(#""drop" is true"#) }
            return .drop
        case "ping":
            let payload = try argument.string()
            guard payload.utf8.count <= 125 else { throw argument.error("a ping's payload is at most 125 bytes") }
            return .ping(payload)
        case "answerPings", "pongs":
            return .answerPings(try argument.bool())
        case "fragment":
            return .fragment(try argument.string(), frames: try members["frames"]?.integer(in: 1...1024) ?? 2)
        default:
            return .fault(try frameFault(argument))
        }
    }

    /// A `fault` action's frame, by name.
    static func frameFault(_ argument: Reader) throws(ScriptError) -> FrameFault {
        let name = try argument.string()
        guard let fault = FrameFault(rawValue: name) else {
            throw argument.error("unknown fault \(name.debugDescription) (known: \(FrameFault.allCases.map(\.rawValue).joined(separator: ", ")))")
        }
        return fault
    }

    /// A close action's code and reason, as a client may be sent them.
    static func closeCode(_ argument: Reader, reason: Reader?) throws(ScriptError) -> (UInt16, String) {
        let code = try argument.integer(in: 1000...4999)
        guard ![1004, 1005, 1006, 1015].contains(code) else {
            throw argument.error("\(code) cannot be sent in a close frame (RFC 6455 section 7.4)")
        }
        let text = try reason?.string() ?? ""
        guard text.utf8.count <= 123 else { throw reason!.error("a close reason is at most 123 bytes") }
        return (UInt16(code), text)
    }

    static func faults(_ value: Reader) throws(ScriptError) -> WebSocketFaults {
        let members = try value.object(keys: ["delaySendsMs", "reorderSends", "duplicateSends", "fragmentSends", "dropAfterSending"])
        return WebSocketFaults(
            delaySends: try members["delaySendsMs"].map { value throws(ScriptError) in .milliseconds(try value.integer(in: 0...86_400_000)) },
            reorderSends: try members["reorderSends"]?.bool() ?? false,
            duplicateSends: try members["duplicateSends"]?.bool() ?? false,
            fragmentSends: try members["fragmentSends"]?.integer(in: 1...1024),
            dropAfterSending: try members["dropAfterSending"]?.integer(in: 1...Int(Int32.max))
        )
    }

    static func refusal(_ value: Reader) throws(ScriptError) -> ScriptRefusal {
        let members = try value.object(keys: ["status", "headers", "body", "times"])
        guard let status = members["status"] else { throw value.error(#"a refusal needs "status""#) }
        var headers: [String: String] = [:]
        if let fields = members["headers"] {
            for (name, field) in try fields.object(keys: nil) {
                guard HTTPToken.isToken(name) else { throw field.error("\(name.debugDescription) is not a header name") }
                headers[name] = try field.string()
            }
        }
        return ScriptRefusal(
            status: try status.integer(in: 400...599),
            headers: headers,
            body: try members["body"]?.string() ?? "",
            times: try members["times"]?.integer(in: 1...Int(Int32.max))
        )
    }

    private static func sse(_ value: Reader) throws(ScriptError) -> (SSEScript, ScriptRefusal?) {
        let members = try value.object(keys: ["events", "everyMs", "then", "retryMs", "refuse"])
        var script = SSEScript(events: [])
        script.events = try members["events"]?.array().map { item throws(ScriptError) in try event(item) } ?? []
        script.every = .milliseconds(try members["everyMs"]?.integer(in: 0...86_400_000) ?? 0)
        if let then = members["then"] {
            let name = try then.string()
            guard let ending = SSEEnding(rawValue: name) else {
                throw then.error("unknown ending \(name.debugDescription) (known: \(SSEEnding.allCases.map(\.rawValue).joined(separator: ", ")))")
            }
            script.then = ending
        }
        script.retryMilliseconds = try members["retryMs"]?.integer(in: 0...86_400_000)
        return (script, try members["refuse"].map { value throws(ScriptError) in try refusal(value) })
    }

    private static func event(_ value: Reader) throws(ScriptError) -> SSEScriptEvent {
        let members = try value.object(keys: ["id", "event", "data", "retry", "comment", "raw"])
        guard !members.isEmpty else { throw value.error(#"an event needs "data", "id", "event", "retry", "comment" or "raw""#) }
        for key in ["comment", "raw"] where members[key] != nil && members.count > 1 {
            throw value.error(#""\#(key)" stands alone in an event"#)
        }
        if let comment = members["comment"] { return .comment(try comment.string()) }
        if let raw = members["raw"] { return .raw(try raw.string()) }
        for key in ["id", "event"] {
            if let field = members[key], try field.string().contains(where: { $0 == "\n" || $0 == "\r" }) {
                throw field.error("an event's \(key) is one line")
            }
        }
        return SSEScriptEvent(
            id: try members["id"]?.string(),
            event: try members["event"]?.string(),
            data: try members["data"]?.string(),
            retry: try members["retry"]?.integer(in: 0...86_400_000)
        )
    }

    /// Why `data` did not decode: where it first breaks JSON's grammar, with the text around it.
    static func notJSON(_ data: Data, _ error: any Error) -> String {
        if let place = JSONSyntaxError.locate(in: data) { return "not JSON \(place)" }
        return "not JSON: \(reason(error))"
    }

    private static func reason(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        switch error {
        case .dataCorrupted(let context): return context.underlyingError.map { "\($0)" } ?? context.debugDescription
        default: return "\(error)"
        }
    }

    /// A value of the script and where it is.
    struct Reader {
        let value: JSONValue
        let at: String

        init(_ value: JSONValue, at: String) {
            self.value = value
            self.at = at
        }

        func error(_ reason: String) -> ScriptError {
            ScriptError(path: at, reason)
        }

        /// The members of an object, each with its place; a key not in `keys` is an error.
        func object(keys: [String]?) throws(ScriptError) -> [String: Reader] {
            guard case .object(let members) = value else { throw error("must be an object (got \(value.kind))") }
            var readers: [String: Reader] = [:]
            for (key, member) in members {
                if let keys, !keys.contains(key) {
                    throw error("unknown key \(key.debugDescription) (known: \(keys.sorted().joined(separator: ", ")))")
                }
                readers[key] = Reader(member, at: at.isEmpty ? key : "\(at).\(key)")
            }
            return readers
        }

        func array() throws(ScriptError) -> [Reader] {
            guard case .array(let items) = value else { throw error("must be an array (got \(value.kind))") }
            return items.enumerated().map { Reader($1, at: "\(at)[\($0)]") }
        }

        func string() throws(ScriptError) -> String {
            guard case .string(let text) = value else { throw error("must be a string (got \(value.kind))") }
            return text
        }

        func bool() throws(ScriptError) -> Bool {
            guard case .bool(let flag) = value else { throw error("must be true or false (got \(value.kind))") }
            return flag
        }

        func integer(in range: ClosedRange<Int>) throws(ScriptError) -> Int {
            guard case .number(let number) = value, number.rounded() == number, let integer = Int(exactly: number), range.contains(integer) else {
                throw error("must be a whole number from \(range.lowerBound) to \(range.upperBound) (got \(value.kind))")
            }
            return integer
        }
    }
}

extension JSONValue {
    /// What kind of value it is, for an error message.
    var kind: String {
        switch self {
        case .null: "null"
        case .bool(let flag): "\(flag)"
        case .number(let number): number.rounded() == number && abs(number) < 1e15 ? "\(Int(number))" : "\(number)"
        case .string(let text): "a string, \(ScriptJournal.excerpt(text).debugDescription)"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// The value as compact JSON text, object members sorted by key.
    var jsonText: String {
        switch self {
        case .null: return "null"
        case .bool(let flag): return flag ? "true" : "false"
        case .number(let number):
            return number.rounded() == number && abs(number) < 1e15 ? String(Int(number)) : "\(number)"
        case .string(let text): return Self.quoted(text)
        case .array(let items): return "[" + items.map(\.jsonText).joined(separator: ",") + "]"
        case .object(let members):
            return "{" + members.sorted { $0.key < $1.key }.map { Self.quoted($0.key) + ":" + $0.value.jsonText }.joined(separator: ",") + "}"
        }
    }

    private static func quoted(_ text: String) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .withoutEscapingSlashes
        let data = (try? encoder.encode(text)) ?? Data("\"\"".utf8)
        return String(decoding: data, as: UTF8.self)
    }
}
