import DuplexHost

/// What a Socket.IO route (``ScriptedRoute/socketIO(_:script:)``) does: its namespaces, what it
/// emits on connect and answers to events, its heartbeat, and how it breaks.
///
/// ```swift
/// let quotes = try ScriptedRoute.socketIO("/socket.io/", script: SocketIOScript(
///     onConnect: [.emit("welcome", #"{"server":"duplex"}"#)],
///     onEvent: [SocketIORule(event: "subscribe", ack: [#""ok""#], do: [.emit("quote", #"{"n":1}"#)])]))
/// ```
public struct SocketIOScript: Sendable {
    /// The namespaces a client may connect to; another gets `connect_error` "Invalid namespace".
    public var namespaces: [String]
    /// What the route does when a client connects to a namespace (in that namespace).
    public var onConnect: [SocketIOAction]
    /// The first rule whose event matches answers an event.
    public var onEvent: [SocketIORule]
    /// Engine.IO's `pingInterval`: the route pings this often.
    public var pingInterval: Duration
    /// Engine.IO's `pingTimeout`: a pong must come within it, or the route closes the connection.
    public var pingTimeout: Duration
    /// Whether the route pings; false stops them, so the client's own timeout
    /// (`pingInterval + pingTimeout`) must end the connection.
    public var sendsPings: Bool
    /// Whether the route ignores the client's pongs, closing the connection after `pingTimeout`
    /// as if none came.
    public var ignoresPongs: Bool
    /// A `connect_error` with this message for every namespace connect; nil connects.
    public var refuseConnect: String?
    /// Decides each namespace connect from the namespace and its auth payload (JSON text, nil
    /// when none): nil connects, a message refuses with `connect_error`. Checked after
    /// ``refuseConnect``.
    public var authorize: (@Sendable (_ namespace: String, _ auth: String?) -> String?)?
    /// The connection is dropped (no close frame) after this many events emitted; nil never.
    public var dropAfterEvents: Int?
    /// Faults on every message the route sends (a delay, reordering, duplicates, fragments, a
    /// drop after the Nth), as on any scripted WebSocket route.
    public var faults: WebSocketFaults

    /// A script; by default the namespace `/`, Socket.IO's default 25-second ping interval and
    /// 20-second timeout.
    public init(
        namespaces: [String] = ["/"],
        onConnect: [SocketIOAction] = [],
        onEvent: [SocketIORule] = [],
        pingInterval: Duration = .seconds(25),
        pingTimeout: Duration = .seconds(20),
        sendsPings: Bool = true,
        ignoresPongs: Bool = false,
        refuseConnect: String? = nil,
        authorize: (@Sendable (_ namespace: String, _ auth: String?) -> String?)? = nil,
        dropAfterEvents: Int? = nil,
        faults: WebSocketFaults = .init()
    ) {
        self.namespaces = namespaces
        self.onConnect = onConnect
        self.onEvent = onEvent
        self.pingInterval = pingInterval
        self.pingTimeout = pingTimeout
        self.sendsPings = sendsPings
        self.ignoresPongs = ignoresPongs
        self.refuseConnect = refuseConnect
        self.authorize = authorize
        self.dropAfterEvents = dropAfterEvents
        self.faults = faults
    }

    /// Checks the namespaces and every JSON text the script carries.
    /// - Throws: ``ScriptError`` naming the place.
    public func validate() throws(ScriptError) {
        for (index, namespace) in namespaces.enumerated() where !namespace.hasPrefix("/") || namespace.contains(",") {
            throw ScriptError(path: "namespaces[\(index)]", "a namespace starts with / and has no comma (got \(namespace.debugDescription))")
        }
        try Self.check(onConnect, at: "onConnect")
        for (index, rule) in onEvent.enumerated() {
            for (item, argument) in (rule.ack ?? []).enumerated() {
                guard JSONValue(argument) != nil else { throw ScriptError(path: "onEvent[\(index)].ack[\(item)]", "not JSON") }
            }
            try Self.check(rule.actions, at: "onEvent[\(index)].do")
        }
    }

    private static func check(_ actions: [SocketIOAction], at path: String) throws(ScriptError) {
        for (index, action) in actions.enumerated() {
            guard case .emit(_, let arguments, _) = action else { continue }
            for (item, argument) in arguments.enumerated() where JSONValue(argument) == nil {
                throw ScriptError(path: "\(path)[\(index)].args[\(item)]", "not JSON: \(ScriptJournal.excerpt(argument).debugDescription)")
            }
        }
    }
}

/// An event a Socket.IO route answers: its acknowledgement, when the client asked for one, and
/// its actions.
public struct SocketIORule: Sendable {
    /// The event's name; nil: every event.
    public var event: String?
    /// The acknowledgement's arguments (JSON texts) when the client asked for one; nil never
    /// acknowledges (an ack never sent).
    public var ack: [String]?
    /// What the route does then, in the event's namespace.
    public var actions: [SocketIOAction]

    /// A rule for `event`.
    public init(event: String?, ack: [String]? = nil, do actions: [SocketIOAction] = []) {
        self.event = event
        self.ack = ack
        self.actions = actions
    }
}

/// Something a Socket.IO route does, in a namespace.
public enum SocketIOAction: Sendable, Equatable {
    /// Emits `event` with `arguments` (JSON texts); with `expectAck`, asks the client to
    /// acknowledge it (its ack is journaled).
    case emit(String, arguments: [String], expectAck: Bool)
    /// Waits.
    case delay(Duration)
    /// Disconnects the client from the namespace (`41`), the connection staying open.
    case disconnect
    /// Closes the Engine.IO connection (a close frame, 1000).
    case close
    /// Drops the connection with no close frame.
    case drop

    /// Emits `event` with one argument, a JSON text.
    public static func emit(_ event: String, _ argument: String) -> SocketIOAction {
        .emit(event, arguments: [argument], expectAck: false)
    }
}
