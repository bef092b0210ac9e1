package import DuplexHost
package import DuplexSchema
import Foundation
import HTTPTypes
package import Logging
import NIOConcurrencyHelpers
package import NIOCore
package import NIOWebSocket

/// A chat member served on its connection's event loop (``EventLoopWebSocketHandler``), with
/// any room store: no task, stream or actor per member. The memory store answers at once; the
/// PostgreSQL store answers later, on the connection's event loop (``StoreAnswer``): up to
/// ``maxSaysInFlight`` of a member's messages wait for it at once, and the handler holds the next
/// ones until the oldest is answered (``EventLoopWebSocketHandler/hold()``).
///
/// It keeps these promises:
/// - the welcome and backlog first, then live events, through the member's
///   ``ChannelTextWriter`` (bounded; 1013 "too far behind" past its bounds, 4001 when a newer
///   connection of the member replaces this one: what was not handed to the channel yet is
///   dropped, since the member resumes with `since`, and the close frame follows);
/// - each `say` answered with an `ack` after the message itself, or an `error` frame (the
///   connection stays open); binary messages get `binary_not_supported`; a member's messages
///   are recorded in the order sent, and acknowledged in that order;
/// - a refused join (a bad room, name, since, token or epoch; `name_taken`; `room_limit`) gets
///   its error frame, then 1008 or 1013; a store that cannot be reached, 1013 with
///   `store_unavailable` as the reason and no error frame (a member that was in the room rejoins
///   after a 1013), and so does a `say` it could not record (the member resends it);
/// - the registry's commands: a stall holds the writer, a close drops what is not yet written;
/// - the member leaves the room when the close handshake begins, from either side.
package final class ChatMemberService: EventLoopWebSocketService {
    private let serving: Context
    /// The client's W3C trace context, for the member's log lines.
    private let trace: ConnectionTrace?
    private let store: any ChatStore
    private let join: Result<ChatJoin, ProtocolRefusal>
    private let roomName: String
    private let session = UUID().uuidString.lowercased()
    private let token: String
    private let writer: ChannelTextWriter
    /// Why the server ends the connection, set from whichever thread finds out (a room's fan-out
    /// runs on the sender's event loop); the close frame follows once the writer has written.
    private let ending = NIOLockedValueBox<(WebSocketCloseCode, String)?>(nil)
    private var membership: (room: ChatRoom, subscription: ChatRoom.Subscription, member: RoomSubscriber.Member)?
    /// The connection began to close, or ended: a join the store answers later is undone.
    private var left = false

    /// What a member's service needs of its server.
    package struct Context: Sendable {
        var metrics: ServerMetrics
        var chatMetrics: ChatMetrics
        var logger: Logger
        var limits: ChatLimits
        var maxRooms: Int

        /// What every member of a server's rooms shares.
        package init(metrics: ServerMetrics, chatMetrics: ChatMetrics, logger: Logger, limits: ChatLimits, maxRooms: Int) {
            self.metrics = metrics
            self.chatMetrics = chatMetrics
            self.logger = logger
            self.limits = limits
            self.maxRooms = maxRooms
        }
    }

    /// A member of `join`'s room, or the refusal of a join that failed validation.
    package init(
        context: Context,
        store: any ChatStore,
        join: Result<ChatJoin, ProtocolRefusal>,
        room: String,
        writer: ChannelTextWriter,
        trace: ConnectionTrace? = nil
    ) {
        self.serving = context
        self.trace = trace
        self.store = store
        self.join = join
        self.roomName = room
        self.token = (try? join.get().token) ?? ChatFrames.makeResumeToken()
        self.writer = writer
    }

    package var connectionInfo: ConnectionInfo { .init(kind: .webSocket, route: "chat", room: roomName) }

    package func start(handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        // Once the writer is done because the server ends the connection, the close frame.
        let bound = NIOLoopBound((handler, context), eventLoop: context.eventLoop)
        let ending = self.ending
        writer.whenWritten {
            guard let (code, reason) = ending.withLockedValue({ $0 }) else { return }
            let (handler, context) = bound.value
            handler.close(code: code, reason: reason, context: context)
        }
        let join: ChatJoin
        switch self.join {
        case .failure(let refusal):
            return refuse(refusal)
        case .success(let valid):
            join = valid
        }
        let member = RoomSubscriber.Member(name: join.name, session: session, token: token)
        let (writer, metrics) = (self.writer, serving.metrics)
        // A member too far behind, or replaced, resumes elsewhere with `since`: what it has not
        // been handed yet is dropped, so the close does not wait on a reader that does not read.
        let end = { @Sendable (code: WebSocketCloseCode, reason: String) in
            ending.withLockedValue { $0 = $0 ?? (code, reason) }
            writer.discard()
        }
        let subscriber = RoomSubscriber(
            member: member,
            deliverAll: { events in writer.offer(events) },
            onOverflow: {
                metrics.cutSlowConsumer()
                end(.tryAgainLater, "too far behind: reconnect with since")
            },
            onReplaced: { end(ChatProtocol.replacedCloseCode, "replaced by a newer connection of this member") }
        )
        switch store.join(room: join.room, subscriber, since: join.since, epoch: join.epoch, on: context.eventLoop) {
        case .now(let result):
            joined(result, join: join, member: member)
        case .later(let answer):
            handler.hold()
            answer.assumeIsolated().whenComplete { outcome in
                let result = (try? outcome.get()) ?? .failure(.unavailable("the join was not answered"))
                self.joined(result, join: join, member: member)
                handler.release(context: context)
            }
        }
    }

    /// The store's answer to the join: the welcome and backlog, or the refusal.
    private func joined(_ result: Result<(ChatRoom, ChatRoom.Subscription), ChatStoreRefusal>, join: ChatJoin, member: RoomSubscriber.Member) {
        switch result {
        case .success(let (room, subscription)):
            guard !left else {
                // The connection went while the store answered: undo the join.
                return store.leave(subscription, member: member, from: room)
            }
            membership = (room, subscription, member)
            serving.chatMetrics.chat.joined(recovered: subscription.recovered, epochChanged: join.epoch.map { $0 != room.epoch } ?? false)
            do {
                writer.start(with: try ChatFrames.firstFrames(join, session: session, token: token, room: room, subscription: subscription))
            } catch {
                ending.withLockedValue { $0 = $0 ?? (.internalServerError, "the welcome could not be encoded") }
                writer.discard()
            }
        case .failure(.unavailable(let why)):
            serving.logger.warning(
                "a join was refused: the room store is unavailable",
                metadata: trace.metadata(route: "chat").merging(["room": "\(join.room)", "error": "\(why)"]) { _, new in new }
            )
            endUnavailable()
        case .failure(let reason):
            refuse(ChatFrames.refusal(reason, name: join.name, maxRooms: serving.maxRooms))
        }
    }

    /// The one place a join is refused: the error frame, then 1013 for a full server and 1008
    /// for the rest.
    private func refuse(_ refusal: ProtocolRefusal) {
        let code: WebSocketCloseCode = refusal.status == .serviceUnavailable ? .tryAgainLater : .policyViolation
        ending.withLockedValue { $0 = (code, String(refusal.error.code.rawValue.prefix(123))) }
        writer.start(with: [refusal.frameJSON])
        writer.finish()
    }

    /// The store cannot be reached: 1013 with `store_unavailable`, after what was written.
    private func endUnavailable() {
        ending.withLockedValue { $0 = $0 ?? (.tryAgainLater, ChatErrorCode.storeUnavailable.rawValue) }
        writer.finish()
    }

    package func receive(_ message: consuming ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext)
    {
        guard let (room, _, _) = membership else { return }
        guard opcode == .text else {
            return reply(.error(ChatErrorFrame(code: .binaryNotSupported, reason: "chat frames are JSON text messages")), in: room)
        }
        let say: ChatSay
        switch ChatFrames.parseSay(text: String(buffer: message), limits: serving.limits) {
        case .failure(let refusal):
            return reply(refusal.frame, in: room)
        case .success(let parsed):
            say = parsed
        }
        let matchByName = (try? join.get().token) == nil
        let name = (try? join.get().name) ?? ""
        switch store.record(say, in: room, from: name, token: token, matchByName: matchByName, on: context.eventLoop) {
        case .now(let result) where inFlight.isEmpty:
            recorded(result, say: say, in: room)
        case .now(let result):
            inFlight.append(InFlightSay(number: nextSayNumber, say: say, result: result))
            nextSayNumber &+= 1
            answerInOrder(in: room, handler: handler, context: context)
        case .later(let answer):
            // Up to `maxSaysInFlight` wait for the store at once (so that they can share a
            // commit); past that, the next message is read once the oldest is answered.
            let number = nextSayNumber
            nextSayNumber &+= 1
            inFlight.append(InFlightSay(number: number, say: say, result: nil))
            if inFlight.count >= Self.maxSaysInFlight, !holding {
                holding = true
                handler.hold()
            }
            answer.assumeIsolated().whenComplete { outcome in
                let result = (try? outcome.get()) ?? .failure(ChatStoreUnavailable(description: "the message was not answered"))
                guard let index = self.inFlight.firstIndex(where: { $0.number == number }) else { return }
                self.inFlight[index].result = result
                self.answerInOrder(in: room, handler: handler, context: context)
            }
        }
    }

    /// How many of a member's messages may wait for the store at once.
    package static let maxSaysInFlight = 32

    /// A message handed to the store, and its answer once there is one.
    private struct InFlightSay {
        var number: UInt64
        var say: ChatSay
        var result: Result<ChatRoom.SayResult, any Error>?
    }

    /// The member's messages the store has not answered, or whose earlier ones it has not: acks
    /// go out in the order the messages were sent.
    private var inFlight = CircularBuffer<InFlightSay>()
    private var nextSayNumber: UInt64 = 0
    /// Reading is held because `maxSaysInFlight` messages wait.
    private var holding = false

    /// Answers the oldest messages whose answers are in, in order. After one the store could not
    /// record, the connection ends and nothing more is answered.
    private func answerInOrder(in room: ChatRoom, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        while let oldest = inFlight.first, let result = oldest.result {
            inFlight.removeFirst()
            guard recorded(result, say: oldest.say, in: room) else {
                inFlight.removeAll()
                return
            }
        }
        if holding, inFlight.count < Self.maxSaysInFlight {
            holding = false
            handler.release(context: context)
        }
    }

    /// Answers a recorded message; false when the store could not record it and the
    /// connection ends.
    @discardableResult
    private func recorded(_ result: Result<ChatRoom.SayResult, any Error>, say: ChatSay, in room: ChatRoom) -> Bool {
        switch result {
        case .success(let outcome):
            serving.chatMetrics.chat.answered(outcome)
            reply(ChatFrames.ack(say, outcome), in: room)
            return true
        case .failure(let error as ChatStoreUnavailable):
            // Not recorded, or not known to be: no ack. The client rejoins and resends what is
            // unacknowledged; a resend of a recorded one is a duplicate.
            serving.logger.warning(
                "a message could not be recorded; closing the member with 1013",
                metadata: trace.metadata(route: "chat").merging(["room": "\(room.name)", "error": "\(error)"]) { _, new in new }
            )
            endUnavailable()
            return false
        case .failure:
            reply(
                .error(ChatErrorFrame(code: .invalidFrame, reason: "the message could not be encoded", clientMessageID: say.clientMessageID)),
                in: room)
            return true
        }
    }

    /// Sends `frame` after the room's events so far: an ack follows its message, even when
    /// another thread is delivering the room's events.
    private func reply(_ frame: ChatServerFrame, in room: ChatRoom) {
        guard let json = try? frame.jsonString() else { return }
        let (writer, ending, metrics) = (self.writer, self.ending, serving.metrics)
        room.afterFanOut {
            if !writer.offer(json) {
                metrics.cutSlowConsumer()
                ending.withLockedValue { $0 = $0 ?? (.tryAgainLater, "too far behind: reconnect with since") }
                writer.discard()
            }
        }
    }

    package func stall(for duration: Duration) {
        writer.stall(for: duration)
    }

    /// The member leaves when the close handshake begins, whichever side begins it: by the time
    /// the client reads the server's close frame, the room has seen it go (its name is free, an
    /// empty room can be evicted).
    package func closing() {
        leave()
    }

    package func end() {
        leave()
    }

    /// Drops what is not yet written and leaves the room; once.
    private func leave() {
        left = true
        writer.discard()
        if let (room, subscription, member) = membership {
            membership = nil
            store.leave(subscription, member: member, from: room)
        }
    }
}
