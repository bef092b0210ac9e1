import DuplexHost
import Foundation
import NIOConcurrencyHelpers

extension ScriptedRoute {
    /// A route that speaks Socket.IO v4 (Engine.IO 4) over the WebSocket transport, at
    /// `path?EIO=4&transport=websocket`, as `script` says: the open packet with `pingInterval` and
    /// `pingTimeout`, namespace connects (with the auth payload journaled, and refused with
    /// `connect_error` as the script decides), events, acknowledgements both ways, binary events
    /// from the client, and the server's pings.
    ///
    /// Long polling is not served: clients set `transports: ["websocket"]` (socket.io-client-swift:
    /// `.forceWebsockets(true)`); a polling request, or another Engine.IO version, is refused with
    /// 400 and Socket.IO's own error body. A packet that does not parse closes the connection, as
    /// a Socket.IO server does, journaled.
    /// - Throws: ``ScriptError`` when a namespace or a JSON text in `script` is wrong.
    public static func socketIO(_ path: String, script: SocketIOScript) throws(ScriptError) -> ScriptedRoute {
        try script.validate()
        let server = SocketIOServer(script: script)
        return .preset(
            path, name: "socket.io", subprotocols: [], faults: script.faults, accept: SocketIOServer.accept,
            onConnect: server.connected, onMessage: server.received, onEnd: server.ended)
    }
}

/// The Socket.IO side of a route: one session per connection.
final class SocketIOServer: Sendable {
    /// The largest message the server reads, as its handshake says (`maxPayload`, Engine.IO's
    /// default): a larger one closes the connection with 1009, as Engine.IO's server does.
    static let maxPayload = 1_000_000
    private let script: SocketIOScript
    private let sessions = NIOLockedValueBox([Int: Session]())

    struct Session {
        var namespaces: Set<String> = []
        /// Which ping a pong answers: a timer of an earlier ping does nothing.
        var pingGeneration = 0
        var awaitingPong = false
        var eventsSent = 0
        var nextAckID = 0
        /// A binary event or ack whose attachments are still arriving.
        var pending: (packet: SocketIOPacket, attachments: Int)?
    }

    init(script: SocketIOScript) {
        self.script = script
    }

    /// Engine.IO 4 over the WebSocket transport only, refused as a Socket.IO server refuses.
    static func accept(_ request: ScriptedRequest) -> UpgradeDecision {
        guard request.queryItem("transport") == "websocket" else {
            return .refuse(status: 400, body: #"{"code":0,"message":"Transport unknown"}"#)
        }
        guard request.queryItem("EIO") == "4" else {
            return .refuse(status: 400, body: #"{"code":5,"message":"Unsupported protocol version"}"#)
        }
        return .accept
    }

    func connected(_ socket: ScriptedWebSocket) throws {
        sessions.withLockedValue { $0[socket.connection] = Session() }
        let interval = Int(script.pingInterval / .milliseconds(1))
        let timeout = Int(script.pingTimeout / .milliseconds(1))
        let sid = UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(20)
        try socket.send(#"0{"sid":"\#(sid)","upgrades":[],"pingInterval":\#(interval),"pingTimeout":\#(timeout),"maxPayload":\#(Self.maxPayload)}"#)
        schedulePing(socket)
    }

    func ended(_ socket: ScriptedWebSocket) {
        sessions.withLockedValue { $0[socket.connection] = nil }
    }

    // MARK: Heartbeat

    private func schedulePing(_ socket: ScriptedWebSocket) {
        guard script.sendsPings else { return }
        let generation = sessions.withLockedValue { sessions in
            sessions[socket.connection]?.pingGeneration += 1
            return sessions[socket.connection]?.pingGeneration ?? 0
        }
        socket.after(script.pingInterval) { [self] in
            guard (try? socket.send("2")) != nil else { return }
            sessions.withLockedValue { $0[socket.connection]?.awaitingPong = true }
            socket.after(script.pingTimeout) { [self] in
                let missed = sessions.withLockedValue { $0[socket.connection].map { $0.awaitingPong && $0.pingGeneration == generation } ?? false }
                guard missed else { return }
                socket.record(.out, .error, data: "socket.io: no pong within pingTimeout; closing")
                try? socket.close(code: 1000, reason: "ping timeout")
            }
        }
    }

    // MARK: Receiving

    func received(_ message: ScriptedMessage, _ socket: ScriptedWebSocket) throws {
        let size = message.text?.utf8.count ?? message.data.count
        guard size <= Self.maxPayload else {
            socket.record(.in, .error, data: "socket.io: a message of \(size) bytes, over maxPayload (\(Self.maxPayload)); closing")
            return try socket.close(code: 1009, reason: "Max payload size exceeded")
        }
        guard let text = message.text else { return try attachment(message.data, socket) }
        guard let type = text.first else { return parseError(socket, "an empty Engine.IO packet") }
        switch type {
        case "1":
            try socket.close(code: 1000, reason: "")
        case "2":
            try socket.send("3" + text.dropFirst())
        case "3":
            guard !script.ignoresPongs else {
                socket.record(.in, .error, data: "socket.io: pong ignored (the script's ignoresPongs)")
                return
            }
            sessions.withLockedValue { $0[socket.connection]?.awaitingPong = false }
            schedulePing(socket)
        case "4":
            guard let packet = SocketIOPacket(text.dropFirst()) else { return parseError(socket, "a Socket.IO packet that does not parse") }
            if packet.attachments > 0 {
                sessions.withLockedValue { $0[socket.connection]?.pending = (packet, packet.attachments) }
            } else {
                try handle(packet, socket)
            }
        case "6":
            return
        default:
            parseError(socket, "unknown Engine.IO packet type \(String(type).debugDescription)")
        }
    }

    private func attachment(_ data: Data, _ socket: ScriptedWebSocket) throws {
        let complete: SocketIOPacket?? = sessions.withLockedValue { sessions in
            guard var pending = sessions[socket.connection]?.pending else { return .none }
            pending.attachments -= 1
            sessions[socket.connection]?.pending = pending.attachments == 0 ? nil : pending
            return pending.attachments == 0 ? .some(pending.packet) : .some(nil)
        }
        switch complete {
        case .none: parseError(socket, "a binary message with no binary packet waiting for it")
        case .some(nil): return
        case .some(let packet?): try handle(packet, socket)
        }
    }

    private func handle(_ packet: SocketIOPacket, _ socket: ScriptedWebSocket) throws {
        let joined = sessions.withLockedValue { $0[socket.connection]?.namespaces.contains(packet.namespace) ?? false }
        switch packet.type {
        case .connect:
            try connect(packet, socket)
        case .disconnect:
            _ = sessions.withLockedValue { $0[socket.connection]?.namespaces.remove(packet.namespace) }
        case .event, .binaryEvent:
            guard joined else { return socket.record(.in, .error, data: "socket.io: an event for \(packet.namespace), not connected; ignored") }
            guard case .array(let items)? = packet.data, case .string(let name)? = items.first else {
                return parseError(socket, "an event whose data is not an array starting with its name")
            }
            guard let rule = script.onEvent.first(where: { $0.event == nil || $0.event == name }) else { return }
            if let id = packet.ackID, let arguments = rule.ack {
                try socket.send("43" + packet.prefix + String(id) + "[" + arguments.joined(separator: ",") + "]")
            }
            run(rule.actions[...], in: packet.namespace, socket)
        case .ack, .binaryAck:
            return  // journaled as received: the client acknowledged an emit that asked for it
        case .connectError:
            parseError(socket, "a client may not send connect_error")
        }
    }

    private func connect(_ packet: SocketIOPacket, _ socket: ScriptedWebSocket) throws {
        let namespace = packet.namespace
        if let data = packet.data, case .object = data {
        } else if packet.data != nil {
            return parseError(socket, "a connect's auth payload is an object")
        }
        let refusal: String? =
            if !script.namespaces.contains(namespace) { "Invalid namespace" } else {
                script.refuseConnect ?? script.authorize?(namespace, packet.data?.jsonText)
            }
        if let refusal {
            try socket.send("44" + packet.prefix + #"{"message":\#(JSONValue.string(refusal).jsonText)}"#)
            return
        }
        sessions.withLockedValue { _ = $0[socket.connection]?.namespaces.insert(namespace) }
        let sid = UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(20)
        try socket.send("40" + packet.prefix + #"{"sid":"\#(sid)"}"#)
        run(script.onConnect[...], in: namespace, socket)
    }

    // MARK: Actions

    private func run(_ actions: ArraySlice<SocketIOAction>, in namespace: String, _ socket: ScriptedWebSocket) {
        let prefix = SocketIOPacket.prefix(namespace)
        var rest = actions
        while let action = rest.popFirst() {
            do {
                switch action {
                case .emit(let event, let arguments, let expectAck):
                    let ackID: String =
                        expectAck
                        ? String(
                            sessions.withLockedValue {
                                $0[socket.connection]?.nextAckID += 1; return $0[socket.connection]?.nextAckID ?? 0
                            }) : ""
                    try socket.send("42" + prefix + ackID + "[" + ([JSONValue.string(event).jsonText] + arguments).joined(separator: ",") + "]")
                    let sent = sessions.withLockedValue { sessions in
                        sessions[socket.connection]?.eventsSent += 1
                        return sessions[socket.connection]?.eventsSent ?? 0
                    }
                    if let limit = script.dropAfterEvents, sent >= limit {
                        socket.record(.out, .error, data: "socket.io: dropping after \(sent) events (the script's dropAfterEvents)")
                        try socket.drop()
                        return
                    }
                case .delay(let duration):
                    let remaining = rest
                    socket.after(duration) { [self] in run(remaining, in: namespace, socket) }
                    return
                case .disconnect:
                    _ = sessions.withLockedValue { $0[socket.connection]?.namespaces.remove(namespace) }
                    try socket.send("41" + prefix)
                case .close:
                    try socket.close(code: 1000, reason: "")
                case .drop:
                    try socket.drop()
                }
            } catch {
                return
            }
        }
    }

    private func parseError(_ socket: ScriptedWebSocket, _ why: String) {
        socket.record(.in, .error, data: "socket.io: parse error: \(why); closing")
        try? socket.close(code: 1000, reason: "parse error")
    }
}

/// A Socket.IO packet: `<type>[<attachments>-][<namespace>,][<ack id>][<JSON>]`.
struct SocketIOPacket {
    enum Kind: Character {
        case connect = "0", disconnect = "1", event = "2", ack = "3", connectError = "4", binaryEvent = "5", binaryAck = "6"
    }

    var type: Kind
    var attachments = 0
    var namespace = "/"
    var ackID: Int?
    var data: JSONValue?

    /// The namespace as a packet writes it: nothing for `/`, else `/name,`.
    var prefix: String { Self.prefix(namespace) }

    static func prefix(_ namespace: String) -> String {
        namespace == "/" ? "" : namespace + ","
    }

    init?(_ text: Substring) {
        var rest = text
        guard let first = rest.popFirst(), let type = Kind(rawValue: first) else { return nil }
        self.type = type
        if type == .binaryEvent || type == .binaryAck {
            guard let dash = rest.firstIndex(of: "-"), let count = Int(rest[..<dash]), (1...64).contains(count) else { return nil }
            attachments = count
            rest = rest[rest.index(after: dash)...]
        }
        if rest.first == "/" {
            let end = rest.firstIndex(of: ",") ?? rest.endIndex
            namespace = String(rest[..<end])
            rest = end == rest.endIndex ? rest[end...] : rest[rest.index(after: end)...]
        }
        let digits = rest.prefix { $0.isASCII && $0.isNumber }
        if !digits.isEmpty {
            guard digits.count <= 15, let id = Int(digits) else { return nil }
            ackID = id
            rest = rest.dropFirst(digits.count)
        }
        if !rest.isEmpty {
            guard let value = JSONValue(String(rest)) else { return nil }
            data = value
        }
    }
}
