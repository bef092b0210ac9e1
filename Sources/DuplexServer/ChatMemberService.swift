import DuplexSchema
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// A chat member served on its connection's event loop (``EventLoopWebSocketHandler``), for the
/// in-memory room store, whose rooms answer at once: no task, stream or actor per member.
///
/// It keeps every promise of the task-served member (``DuplexServer/serveChat``):
/// - the welcome and backlog first, then live events, through the member's
///   ``ChannelTextWriter`` (bounded; 1013 "too far behind" past its bounds, 4001 when a newer
///   connection of the member replaces this one: what was not handed to the channel yet is
///   dropped, since the member resumes with `since`, and the close frame follows);
/// - each `say` answered with an `ack` after the message itself, or an `error` frame (the
///   connection stays open); binary messages get `binary_not_supported`;
/// - a refused join (`name_taken`, `room_limit`) gets its error frame, then 1008 or 1013;
/// - the registry's commands: a stall holds the writer, a close drops what is not yet written;
/// - the member leaves the room when the close handshake begins, from either side.
///
/// A `say` is recorded and fanned out on the sender's event loop, before the next frame is read
/// (unless another thread is delivering the room's events: then that thread delivers it, and
/// the ack after it).
final class ChatMemberService: EventLoopWebSocketService {
    private let server: DuplexServer
    private let rooms: ChatRooms
    private let join: ChatJoin
    private let session = UUID().uuidString.lowercased()
    private let token: String
    private let writer: ChannelTextWriter
    /// Why the server ends the connection, set from whichever thread finds out (a room's fan-out
    /// runs on the sender's event loop); the close frame follows once the writer has written.
    private let ending = NIOLockedValueBox<(WebSocketCloseCode, String)?>(nil)
    private var membership: (room: ChatRoom, subscription: ChatRoom.Subscription, member: RoomSubscriber.Member)?

    init(server: DuplexServer, rooms: ChatRooms, join: ChatJoin, writer: ChannelTextWriter) {
        self.server = server
        self.rooms = rooms
        self.join = join
        self.token = join.token ?? DuplexServer.makeResumeToken()
        self.writer = writer
    }

    var connectionInfo: ConnectionInfo { .init(kind: .webSocket, route: "chat", room: join.room) }

    func start(handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        let writer = self.writer
        let ending = self.ending
        // A member too far behind, or replaced, resumes elsewhere with `since`: what it has not
        // been handed yet is dropped, so the close does not wait on a reader that does not read.
        let end = { @Sendable (code: WebSocketCloseCode, reason: String) in
            ending.withLockedValue { $0 = $0 ?? (code, reason) }
            writer.discard()
        }
        let member = RoomSubscriber.Member(name: join.name, session: session, token: token)
        let subscriber = RoomSubscriber(
            member: member,
            deliver: { event in writer.offer(event) },
            onOverflow: { end(.tryAgainLater, "too far behind: reconnect with since") },
            onReplaced: { end(ChatProtocol.replacedCloseCode, "replaced by a newer connection of this member") }
        )
        switch rooms.subscribe(room: join.room, subscriber, since: join.since, epoch: join.epoch) {
        case .success(let (room, subscription)):
            membership = (room, subscription, member)
            do {
                writer.start(with: try DuplexServer.firstFrames(join, session: session, token: token, room: room, subscription: subscription))
            } catch {
                end(.internalServerError, "the welcome could not be encoded")
            }
        case .failure(let reason):
            let refusal = server.refusal(reason, name: join.name)
            ending.withLockedValue { $0 = (reason == .roomLimit ? .tryAgainLater : .policyViolation, String(refusal.error.code.rawValue.prefix(123))) }
            writer.start(with: [refusal.frameJSON])
            writer.finish()
        }
        // Once the writer is done because the server ends the connection, the close frame.
        let bound = NIOLoopBound((handler, context), eventLoop: context.eventLoop)
        writer.whenWritten {
            guard let (code, reason) = ending.withLockedValue({ $0 }) else { return }
            let (handler, context) = bound.value
            handler.close(code: code.nio, reason: reason, context: context)
        }
    }

    func receive(_ message: ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        guard let (room, _, _) = membership else { return }
        let reply: ChatServerFrame
        if opcode == .text {
            reply = DuplexServer.answerNow(
                text: String(buffer: message),
                from: join.name,
                token: token,
                matchByName: join.token == nil,
                in: room,
                limits: server.configuration.chatLimits
            )
        } else {
            reply = .error(ChatErrorFrame(code: .binaryNotSupported, reason: "chat frames are JSON text messages"))
        }
        guard let json = try? reply.jsonString() else { return }
        // After the room's events so far: an ack follows its message, even when another thread
        // is delivering the room's events.
        let (writer, ending) = (self.writer, self.ending)
        room.afterFanOut {
            if !writer.offer(json) {
                ending.withLockedValue { $0 = $0 ?? (.tryAgainLater, "too far behind: reconnect with since") }
                writer.discard()
            }
        }
    }

    func stall(for duration: Duration) {
        writer.stall(for: duration)
    }

    /// The member leaves when the close handshake begins, whichever side begins it: by the time
    /// the client reads the server's close frame, the room has seen it go (its name is free, an
    /// empty room can be evicted).
    func closing() {
        leave()
    }

    func end() {
        leave()
    }

    /// Drops what is not yet written and leaves the room; once.
    private func leave() {
        writer.discard()
        if let (room, subscription, _) = membership {
            membership = nil
            room.unsubscribe(subscription.id)
        }
    }
}
