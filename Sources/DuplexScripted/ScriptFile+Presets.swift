import DuplexHost
import Foundation

/// A script's protocol presets: `"graphql"`, `"socketio"` and `"mqtt"` routes
/// (docs/scripts.md, "Protocol presets").
extension ScriptFile {
    /// The route keys that name a preset.
    static let presetKeys = ["graphql", "socketio", "mqtt"]

    private static let graphQLKeys = ["operations", "acknowledge", "ackPayload", "initTimeoutMs", "refuseInit", "pingEveryMs", "faults"]
    private static let graphQLOperationKeys = ["match", "next", "everyMs", "then", "error", "close", "reason"]
    private static let graphQLMatchKeys = ["operationName", "queryContains", "variables"]
    private static let socketIOKeys = [
        "namespaces", "onConnect", "onEvent", "pingIntervalMs", "pingTimeoutMs", "pings", "ignorePongs", "refuseConnect", "dropAfterEvents",
        "faults",
    ]
    private static let socketIORuleKeys = ["event", "ack", "do"]
    private static let socketIOActionKeys = ["emit", "delayMs", "disconnect", "close", "drop"]
    private static let socketIOEmitKeys = ["data", "args", "expectAck"]
    private static let mqttKeys = ["connack", "answerPings", "acknowledgePublishes", "onSubscribe", "maxPacketBytes", "faults"]
    private static let mqttRuleKeys = ["topic", "do"]
    private static let mqttActionKeys = ["publish", "delayMs", "dropMidPacket", "disconnect", "drop"]
    private static let mqttPublishKeys = ["payload", "payloadBase64", "qos", "retain"]

    /// Every key a preset's script may hold, at any depth, for the test that holds
    /// docs/scripts.md to them.
    package static var presetScriptKeys: Set<String> {
        Set(
            graphQLKeys + graphQLOperationKeys + graphQLMatchKeys + socketIOKeys + socketIORuleKeys + socketIOActionKeys + socketIOEmitKeys
                + mqttKeys + mqttRuleKeys + mqttActionKeys + mqttPublishKeys)
    }

    static func preset(_ key: String, _ value: Reader, path: String) throws(ScriptError) -> ScriptedRoute {
        do {
            switch key {
            case "graphql": return try .graphQL(path, script: graphQL(value))
            case "socketio": return try .socketIO(path, script: socketIO(value))
            default: return try .mqtt(path, script: mqtt(value))
            }
        } catch {
            // A script's own check names its place from the preset's root: put the route's in front.
            throw error.path.hasPrefix(value.at) ? error : ScriptError(path: "\(value.at).\(error.path)", error.reason)
        }
    }

    // MARK: graphql-transport-ws

    private static func graphQL(_ value: Reader) throws(ScriptError) -> GraphQLScript {
        let members = try value.object(keys: graphQLKeys)
        var script = GraphQLScript(operations: try members["operations"]?.array().map { item throws(ScriptError) in try operation(item) } ?? [])
        script.acknowledge = try members["acknowledge"]?.bool() ?? true
        if let payload = members["ackPayload"] {
            guard case .object = payload.value else { throw payload.error("must be an object") }
            script.ackPayload = payload.value.jsonText
        }
        if let timeout = members["initTimeoutMs"] { script.initTimeout = .milliseconds(try timeout.integer(in: 1...86_400_000)) }
        if let refusal = members["refuseInit"] { script.refuseInit = try graphQLClose(refusal) }
        if let faults = members["faults"] { script.faults = try self.faults(faults) }
        script.pingEvery = try members["pingEveryMs"].map { value throws(ScriptError) in .milliseconds(try value.integer(in: 1...86_400_000)) }
        return script
    }

    private static func operation(_ value: Reader) throws(ScriptError) -> GraphQLOperation {
        let members = try value.object(keys: graphQLOperationKeys)
        var match = GraphQLMatch.any
        if let matchValue = members["match"] {
            let conditions = try matchValue.object(keys: graphQLMatchKeys)
            match.operationName = try conditions["operationName"]?.string()
            match.queryContains = try conditions["queryContains"]?.string()
            if let variables = conditions["variables"] {
                guard case .object = variables.value else { throw variables.error("must be an object: the members the variables must have") }
                match.variables = variables.value.jsonText
            }
        }
        var operation = GraphQLOperation(match: match)
        operation.next =
            try members["next"]?.array().map { item throws(ScriptError) in
                guard case .object = item.value else { throw item.error(#"a "next" payload is an object, such as {"data": {…}}"#) }
                return item.value.jsonText
            } ?? []
        operation.every = .milliseconds(try members["everyMs"]?.integer(in: 0...86_400_000) ?? 0)
        let endings = ["then", "error", "close"].filter { members[$0] != nil }
        guard endings.count <= 1 else {
            throw value.error(#"an operation ends one way: "then", "error" or "close" (got \#(endings.joined(separator: ", ")))"#)
        }
        if let reason = members["reason"], members["close"] == nil { throw reason.error(#""reason" goes with "close""#) }
        if let then = members["then"] {
            switch try then.string() {
            case "complete": operation.then = .complete
            case "never": operation.then = .never
            case "drop": operation.then = .drop
            case let other: throw then.error(#"unknown ending \#(other.debugDescription) (known: complete, drop, never; or "error" or "close")"#)
            }
        }
        if let errors = members["error"] {
            guard case .array(let items) = errors.value, !items.isEmpty else { throw errors.error("must be a non-empty array of GraphQL errors") }
            operation.then = .error(errors.value.jsonText)
        }
        if let close = members["close"] {
            let (code, reason) = try closeCode(close, reason: members["reason"])
            operation.then = .close(GraphQLClose(code: code, reason: reason))
        }
        return operation
    }

    private static func graphQLClose(_ value: Reader) throws(ScriptError) -> GraphQLClose {
        let members = try value.object(keys: ["close", "reason"])
        guard let close = members["close"] else { throw value.error(#"needs "close", a close code such as 4403"#) }
        let (code, reason) = try closeCode(close, reason: members["reason"])
        return GraphQLClose(code: code, reason: reason)
    }

    // MARK: Socket.IO

    private static func socketIO(_ value: Reader) throws(ScriptError) -> SocketIOScript {
        let members = try value.object(keys: socketIOKeys)
        var script = SocketIOScript()
        if let namespaces = members["namespaces"] { script.namespaces = try namespaces.array().map { item throws(ScriptError) in try item.string() } }
        script.onConnect = try members["onConnect"]?.array().map { item throws(ScriptError) in try socketIOAction(item) } ?? []
        script.onEvent = try members["onEvent"]?.array().map { item throws(ScriptError) in try socketIORule(item) } ?? []
        if let interval = members["pingIntervalMs"] { script.pingInterval = .milliseconds(try interval.integer(in: 1...86_400_000)) }
        if let timeout = members["pingTimeoutMs"] { script.pingTimeout = .milliseconds(try timeout.integer(in: 1...86_400_000)) }
        script.sendsPings = try members["pings"]?.bool() ?? true
        script.ignoresPongs = try members["ignorePongs"]?.bool() ?? false
        script.refuseConnect = try members["refuseConnect"]?.string()
        script.dropAfterEvents = try members["dropAfterEvents"]?.integer(in: 1...Int(Int32.max))
        if let faults = members["faults"] { script.faults = try self.faults(faults) }
        return script
    }

    private static func socketIORule(_ value: Reader) throws(ScriptError) -> SocketIORule {
        let members = try value.object(keys: socketIORuleKeys)
        return SocketIORule(
            event: try members["event"]?.string(),
            ack: try members["ack"].map { ack throws(ScriptError) in
                guard case .array(let items) = ack.value else { throw ack.error("must be an array: the acknowledgement's arguments") }
                return items.map(\.jsonText)
            },
            do: try members["do"]?.array().map { item throws(ScriptError) in try socketIOAction(item) } ?? []
        )
    }

    private static func socketIOAction(_ value: Reader) throws(ScriptError) -> SocketIOAction {
        let members = try value.object(keys: socketIOActionKeys + socketIOEmitKeys)
        let named = socketIOActionKeys.filter { members[$0] != nil }
        guard named.count == 1, let key = named.first, let argument = members[key] else {
            throw value.error(
                "an action has exactly one of \(socketIOActionKeys.joined(separator: ", ")) (got \(named.isEmpty ? "none" : named.joined(separator: ", ")))"
            )
        }
        for extra in socketIOEmitKeys where key != "emit" && members[extra] != nil {
            throw members[extra]!.error(#""\#(extra)" goes with "emit""#)
        }
        switch key {
        case "emit":
            if members["data"] != nil, members["args"] != nil { throw value.error(#"an emit has "data" (one argument) or "args", not both"#) }
            var arguments: [String] = []
            if let data = members["data"] { arguments = [data.value.jsonText] }
            if let args = members["args"] {
                guard case .array(let items) = args.value else { throw args.error("must be an array: the event's arguments") }
                arguments = items.map(\.jsonText)
            }
            return .emit(try argument.string(), arguments: arguments, expectAck: try members["expectAck"]?.bool() ?? false)
        case "delayMs": return .delay(.milliseconds(try argument.integer(in: 0...86_400_000)))
        default:
            guard try argument.bool() else { throw argument.error(#""\#(key)" is true"#) }
            return key == "disconnect" ? .disconnect : key == "close" ? .close : .drop
        }
    }

    // MARK: MQTT

    private static func mqtt(_ value: Reader) throws(ScriptError) -> MQTTScript {
        let members = try value.object(keys: mqttKeys)
        var script = MQTTScript()
        script.connack = UInt8(try members["connack"]?.integer(in: 0...255) ?? 0)
        script.answerPings = try members["answerPings"]?.bool() ?? true
        script.acknowledgePublishes = try members["acknowledgePublishes"]?.bool() ?? true
        if let faults = members["faults"] { script.faults = try self.faults(faults) }
        script.maxPacketBytes = try members["maxPacketBytes"]?.integer(in: 16...(256 << 20)) ?? script.maxPacketBytes
        script.onSubscribe =
            try members["onSubscribe"]?.array().map { item throws(ScriptError) in
                let rule = try item.object(keys: mqttRuleKeys)
                guard let topic = rule["topic"] else { throw item.error(#"a rule needs "topic", the filter a client subscribes to"#) }
                return MQTTRule(
                    topic: try topic.string(), do: try rule["do"]?.array().map { action throws(ScriptError) in try mqttAction(action) } ?? [])
            } ?? []
        return script
    }

    private static func mqttAction(_ value: Reader) throws(ScriptError) -> MQTTAction {
        let members = try value.object(keys: mqttActionKeys + mqttPublishKeys)
        let named = mqttActionKeys.filter { members[$0] != nil }
        guard named.count == 1, let key = named.first, let argument = members[key] else {
            throw value.error(
                "an action has exactly one of \(mqttActionKeys.joined(separator: ", ")) (got \(named.isEmpty ? "none" : named.joined(separator: ", ")))"
            )
        }
        for extra in mqttPublishKeys where key != "publish" && members[extra] != nil {
            throw members[extra]!.error(#""\#(extra)" goes with "publish""#)
        }
        switch key {
        case "publish":
            if members["payload"] != nil, members["payloadBase64"] != nil {
                throw value.error(#"a publish has "payload" or "payloadBase64", not both"#)
            }
            var payload = Data(try members["payload"]?.string().utf8 ?? "".utf8)
            if let base64 = members["payloadBase64"] {
                guard let data = Data(base64Encoded: try base64.string()) else { throw base64.error("must be base64") }
                payload = data
            }
            return .publish(
                topic: try argument.string(), payload: payload, qos: try members["qos"]?.integer(in: 0...1) ?? 0,
                retain: try members["retain"]?.bool() ?? false)
        case "delayMs": return .delay(.milliseconds(try argument.integer(in: 0...86_400_000)))
        default:
            guard try argument.bool() else { throw argument.error(#""\#(key)" is true"#) }
            return key == "dropMidPacket" ? .dropMidPacket : key == "disconnect" ? .disconnect : .drop
        }
    }
}
