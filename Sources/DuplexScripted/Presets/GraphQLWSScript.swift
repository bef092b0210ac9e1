import DuplexHost
import Foundation

/// What a `graphql-transport-ws` route (``ScriptedRoute/graphQL(_:script:)``) answers: the
/// operations it knows, matched without a GraphQL parser, and how the connection breaks.
///
/// ```swift
/// let graphQL = try ScriptedRoute.graphQL("/graphql", script: GraphQLScript(operations: [
///     GraphQLOperation(match: .queryContains("ticks"), next: [#"{"data":{"ticks":1}}"#], then: .complete),
///     GraphQLOperation(match: .queryContains("fail"), then: .error(#"[{"message":"boom"}]"#)),
/// ]))
/// ```
public struct GraphQLScript: Sendable {
    /// The operations, the first that matches a `subscribe` answering it; one that none matches
    /// gets an `error` saying so.
    public var operations: [GraphQLOperation]
    /// Whether `connection_init` is acknowledged; false withholds `connection_ack`, so that the
    /// route closes the connection with 4408 once ``initTimeout`` passes, as the spec says.
    public var acknowledge: Bool
    /// The `connection_ack`'s payload, a JSON object as text; nil sends none.
    public var ackPayload: String?
    /// How long the route waits for an acknowledged `connection_init` before it closes the
    /// connection with 4408 (graphql-ws's own default is 3 seconds).
    public var initTimeout: Duration
    /// A close instead of the ack, such as 4401 or 4403 for a refused token; nil acknowledges.
    public var refuseInit: GraphQLClose?
    /// Decides each `connection_init` from its payload (JSON text, nil when it has none): nil
    /// acknowledges, a close refuses. Checked after ``refuseInit``.
    public var authorize: (@Sendable (_ payload: String?) -> GraphQLClose?)?
    /// The interval of the route's own `ping` messages, from the ack on; nil sends none (the
    /// client's pings are answered either way).
    public var pingEvery: Duration?
    /// Faults on every message the route sends (a delay, reordering, duplicates, fragments, a
    /// drop after the Nth), as on any scripted WebSocket route.
    public var faults: WebSocketFaults

    /// A script of `operations`, acknowledged, with graphql-ws's 3-second init timeout.
    public init(
        operations: [GraphQLOperation],
        acknowledge: Bool = true,
        ackPayload: String? = nil,
        initTimeout: Duration = .seconds(3),
        refuseInit: GraphQLClose? = nil,
        authorize: (@Sendable (_ payload: String?) -> GraphQLClose?)? = nil,
        pingEvery: Duration? = nil,
        faults: WebSocketFaults = .init()
    ) {
        self.operations = operations
        self.acknowledge = acknowledge
        self.ackPayload = ackPayload
        self.initTimeout = initTimeout
        self.refuseInit = refuseInit
        self.authorize = authorize
        self.pingEvery = pingEvery
        self.faults = faults
    }

    /// Checks every JSON text the script carries.
    /// - Throws: ``ScriptError`` naming the operation and what is not JSON.
    public func validate() throws(ScriptError) {
        if let ackPayload { try Self.check(ackPayload, object: true, at: "ackPayload") }
        for (index, operation) in operations.enumerated() {
            for (item, payload) in operation.next.enumerated() {
                try Self.check(payload, object: true, at: "operations[\(index)].next[\(item)]")
            }
            if case .error(let errors) = operation.then {
                guard case .array(let items)? = JSONValue(errors), !items.isEmpty else {
                    throw ScriptError(path: "operations[\(index)].error", "must be a non-empty JSON array of GraphQL errors")
                }
            }
            if let variables = operation.match.variables { try Self.check(variables, object: true, at: "operations[\(index)].match.variables") }
            if case .close(let close) = operation.then { try close.validate(at: "operations[\(index)].close") }
        }
        try refuseInit?.validate(at: "refuseInit")
    }

    static func check(_ text: String, object: Bool, at path: String) throws(ScriptError) {
        guard let value = JSONValue(text) else { throw ScriptError(path: path, "not JSON: \(ScriptJournal.excerpt(text).debugDescription)") }
        if object, case .object = value {} else if object { throw ScriptError(path: path, "must be a JSON object (got \(value.kind))") }
    }
}

/// A GraphQL operation a route knows: what `subscribe` it answers, with which `next` payloads,
/// at what pace, and how it ends.
public struct GraphQLOperation: Sendable {
    /// Which `subscribe` messages it answers.
    public var match: GraphQLMatch
    /// The `next` payloads, in order, each a JSON object as text (`{"data": …}`, or one with
    /// `errors` for a result with field errors).
    public var next: [String]
    /// The pause before each `next`.
    public var every: Duration
    /// What follows the last `next`.
    public var then: GraphQLEnding

    /// An operation answered with `next`, paced by `every`, then `then`.
    public init(match: GraphQLMatch, next: [String] = [], every: Duration = .zero, then: GraphQLEnding = .complete) {
        self.match = match
        self.next = next
        self.every = every
        self.then = then
    }
}

/// Which `subscribe` messages a ``GraphQLOperation`` answers: every condition given must hold.
public struct GraphQLMatch: Sendable, Equatable {
    /// The payload's `operationName`.
    public var operationName: String?
    /// Text the payload's `query` contains.
    public var queryContains: String?
    /// A JSON object (as text) whose members the payload's `variables` must have, at every depth.
    public var variables: String?

    /// A match of the conditions given; with none, every operation.
    public init(operationName: String? = nil, queryContains: String? = nil, variables: String? = nil) {
        self.operationName = operationName
        self.queryContains = queryContains
        self.variables = variables
    }

    /// Every operation.
    public static let any = GraphQLMatch()

    /// Operations whose query contains `text`.
    public static func queryContains(_ text: String) -> GraphQLMatch { GraphQLMatch(queryContains: text) }

    /// Operations named `name`.
    public static func operationName(_ name: String) -> GraphQLMatch { GraphQLMatch(operationName: name) }

    func matches(_ payload: [String: JSONValue]) -> Bool {
        if let operationName, payload["operationName"] != .string(operationName) { return false }
        if let queryContains {
            guard case .string(let query)? = payload["query"], query.contains(queryContains) else { return false }
        }
        if let variables, let wanted = JSONValue(variables) {
            guard let given = payload["variables"], given.contains(wanted) else { return false }
        }
        return true
    }
}

/// How a ``GraphQLOperation`` ends after its `next` messages.
public enum GraphQLEnding: Sendable, Equatable {
    /// `complete`.
    case complete
    /// An `error` message with these GraphQL errors (a JSON array as text); no `complete`
    /// follows, as the spec says.
    case error(String)
    /// Nothing: the subscription never completes.
    case never
    /// The connection dropped with no close frame (a drop after the Nth `next`).
    case drop
    /// The connection closed with this code and reason.
    case close(GraphQLClose)
}

/// A close of a graphql-transport-ws connection, in the protocol's own codes.
public struct GraphQLClose: Sendable, Equatable {
    /// The close code (4400 to 4499 are the protocol's own).
    public var code: UInt16
    /// The reason.
    public var reason: String

    /// A close with `code` and `reason`.
    public init(code: UInt16, reason: String) {
        self.code = code
        self.reason = reason
    }

    /// 4400: a message the protocol does not allow.
    public static func badRequest(_ reason: String = "Invalid message received") -> GraphQLClose { .init(code: 4400, reason: reason) }
    /// 4401: not authorised (a `subscribe` before the ack, or a refused init).
    public static let unauthorized = GraphQLClose(code: 4401, reason: "Unauthorized")
    /// 4403: forbidden (a refused init).
    public static let forbidden = GraphQLClose(code: 4403, reason: "Forbidden")
    /// 4408: no acknowledged `connection_init` in time.
    public static let initTimeout = GraphQLClose(code: 4408, reason: "Connection initialisation timeout")
    /// 4429: a second `connection_init`.
    public static let tooManyInits = GraphQLClose(code: 4429, reason: "Too many initialisation requests")

    func validate(at path: String) throws(ScriptError) {
        guard (1000...4999).contains(code), ![1004, 1005, 1006, 1015].contains(code) else {
            throw ScriptError(path: path, "\(code) cannot be sent in a close frame (RFC 6455 section 7.4)")
        }
        guard reason.utf8.count <= 123 else { throw ScriptError(path: path, "a close reason is at most 123 bytes") }
    }
}
