import DuplexHost
import Foundation
import NIOConcurrencyHelpers

extension ScriptedRoute {
    /// A route that speaks graphql-transport-ws (the `graphql-ws` library's protocol, the
    /// subprotocol `graphql-transport-ws`) as `script` says: `connection_init` and
    /// `connection_ack`, `ping` and `pong` both ways, `subscribe` answered with `next` messages
    /// and `complete` or `error`, several operations at once by id, `complete` from the client.
    ///
    /// Breaking the protocol gets the spec's close: 4400 for a message that is not JSON or not a
    /// valid message, 4401 for a `subscribe` before the ack, 4408 when no `connection_init` is
    /// acknowledged in time, 4409 for an id already in use, 4429 for a second `connection_init`,
    /// 4406 when the client did not offer the subprotocol. Everything is journaled.
    /// - Throws: ``ScriptError`` when a JSON text in `script` is not JSON.
    public static func graphQL(_ path: String, script: GraphQLScript) throws(ScriptError) -> ScriptedRoute {
        try script.validate()
        let server = GraphQLWSServer(script: script)
        return .preset(
            path, name: "graphql-transport-ws", subprotocols: [GraphQLWSServer.subprotocol], faults: script.faults,
            onConnect: server.connected, onMessage: server.received, onEnd: server.ended)
    }
}

/// The graphql-transport-ws side of a route: one session per connection.
final class GraphQLWSServer: Sendable {
    static let subprotocol = "graphql-transport-ws"
    /// The most operations one connection may run at once: one more gets an `error` message.
    static let maxOperations = 1_000

    private let script: GraphQLScript
    private let sessions = NIOLockedValueBox([Int: Session]())

    struct Session {
        var initReceived = false
        var acknowledged = false
        /// The operations running, by id.
        var active: Set<String> = []
    }

    init(script: GraphQLScript) {
        self.script = script
    }

    func connected(_ socket: ScriptedWebSocket) throws {
        guard socket.request.subprotocol == Self.subprotocol else {
            return close(socket, GraphQLClose(code: 4406, reason: "Subprotocol not acceptable"))
        }
        sessions.withLockedValue { $0[socket.connection] = Session() }
        socket.after(script.initTimeout) { [self] in
            let acknowledged = sessions.withLockedValue { $0[socket.connection]?.acknowledged ?? true }
            if !acknowledged { close(socket, .initTimeout) }
        }
    }

    func ended(_ socket: ScriptedWebSocket) {
        sessions.withLockedValue { $0[socket.connection] = nil }
    }

    private func ping(_ socket: ScriptedWebSocket, every: Duration) {
        socket.after(every) { [self] in
            try? socket.send(#"{"type":"ping"}"#)
            ping(socket, every: every)
        }
    }

    func received(_ message: ScriptedMessage, _ socket: ScriptedWebSocket) throws {
        guard let text = message.text, case .object(let members)? = JSONValue(text), case .string(let type)? = members["type"] else {
            return close(socket, .badRequest(message.text == nil ? "Binary messages are not allowed" : "Invalid message received"))
        }
        switch type {
        case "connection_init":
            try initialise(members["payload"], socket)
        case "ping":
            try socket.send(members["payload"].map { #"{"type":"pong","payload":\#($0.jsonText)}"# } ?? #"{"type":"pong"}"#)
        case "pong":
            return
        case "subscribe":
            guard case .string(let id)? = members["id"], !id.isEmpty, case .object(let payload)? = members["payload"],
                case .string = payload["query"]
            else { return close(socket, .badRequest()) }
            try subscribe(id: id, payload, socket)
        case "complete":
            guard case .string(let id)? = members["id"] else { return close(socket, .badRequest()) }
            _ = sessions.withLockedValue { $0[socket.connection]?.active.remove(id) }
        default:
            close(socket, .badRequest("Invalid message received: unknown type \(ScriptJournal.excerpt(type).debugDescription)"))
        }
    }

    private func initialise(_ payload: JSONValue?, _ socket: ScriptedWebSocket) throws {
        let again = sessions.withLockedValue { sessions in
            defer { sessions[socket.connection]?.initReceived = true }
            return sessions[socket.connection]?.initReceived ?? true
        }
        if again { return close(socket, .tooManyInits) }
        if let refusal = script.refuseInit ?? script.authorize?(payload?.jsonText) { return close(socket, refusal) }
        guard script.acknowledge else {
            socket.record(.out, .error, data: "connection_ack withheld (the script's acknowledge is false)")
            return
        }
        sessions.withLockedValue { $0[socket.connection]?.acknowledged = true }
        try socket.send(script.ackPayload.map { #"{"type":"connection_ack","payload":\#($0)}"# } ?? #"{"type":"connection_ack"}"#)
        if let every = script.pingEvery { ping(socket, every: every) }
    }

    private func subscribe(id: String, _ payload: [String: JSONValue], _ socket: ScriptedWebSocket) throws {
        enum Start { case unauthorized, duplicate, tooMany, started }
        let start: Start = sessions.withLockedValue { sessions in
            guard let session = sessions[socket.connection], session.acknowledged else { return .unauthorized }
            guard !session.active.contains(id) else { return .duplicate }
            guard session.active.count < Self.maxOperations else { return .tooMany }
            sessions[socket.connection]?.active.insert(id)
            return .started
        }
        let quoted = JSONValue.string(id).jsonText
        switch start {
        case .unauthorized: return close(socket, .unauthorized)
        case .duplicate: return close(socket, GraphQLClose(code: 4409, reason: "Subscriber for \(id) already exists"))
        case .tooMany:
            // An error for this operation alone: the others run on, and nothing grows past the limit.
            socket.record(
                .in, .error,
                data:
                    "graphql-ws: \(Self.maxOperations) operations already run on this connection: \(String(id.prefix(100)).debugDescription) refused")
            try socket.send(
                #"{"id":\#(quoted),"type":"error","payload":[{"message":"too many operations at once on this connection (at most \#(Self.maxOperations))"}]}"#
            )
            return
        case .started: break
        }
        guard let operation = script.operations.first(where: { $0.match.matches(payload) }) else {
            finish(id, socket)
            try socket.send(#"{"id":\#(quoted),"type":"error","payload":[{"message":"no operation of the route's script matches this one"}]}"#)
            return
        }
        run(operation, id: id, quoted: quoted, from: 0, socket)
    }

    /// Sends `operation`'s `next` messages from `index` on, paced, then its ending; stops when
    /// the client completed the operation or the connection closed.
    private func run(_ operation: GraphQLOperation, id: String, quoted: String, from index: Int, _ socket: ScriptedWebSocket) {
        guard sessions.withLockedValue({ $0[socket.connection]?.active.contains(id) ?? false }) else { return }
        if operation.next.count > index, operation.every > .zero {
            socket.after(operation.every) { [self] in step(operation, id: id, quoted: quoted, index: index, socket) }
        } else {
            step(operation, id: id, quoted: quoted, index: index, socket)
        }
    }

    private func step(_ operation: GraphQLOperation, id: String, quoted: String, index: Int, _ socket: ScriptedWebSocket) {
        guard sessions.withLockedValue({ $0[socket.connection]?.active.contains(id) ?? false }) else { return }
        do {
            if index < operation.next.count {
                try socket.send(#"{"id":\#(quoted),"type":"next","payload":\#(operation.next[index])}"#)
                return run(operation, id: id, quoted: quoted, from: index + 1, socket)
            }
            switch operation.then {
            case .complete:
                finish(id, socket)
                try socket.send(#"{"id":\#(quoted),"type":"complete"}"#)
            case .error(let errors):
                finish(id, socket)
                try socket.send(#"{"id":\#(quoted),"type":"error","payload":\#(errors)}"#)
            case .never:
                return
            case .drop:
                try socket.drop()
            case .close(let close):
                try socket.close(code: close.code, reason: close.reason)
            }
        } catch {
            return
        }
    }

    private func finish(_ id: String, _ socket: ScriptedWebSocket) {
        _ = sessions.withLockedValue { $0[socket.connection]?.active.remove(id) }
    }

    private func close(_ socket: ScriptedWebSocket, _ close: GraphQLClose) {
        // A reason may carry the client's own text (an id, a type): cut to what a close frame holds.
        let reason = ScriptedWebSocket.closeReason(close.reason)
        socket.record(.out, .error, data: "graphql-transport-ws: \(close.code) \(reason)")
        try? socket.close(code: close.code, reason: reason)
    }
}
