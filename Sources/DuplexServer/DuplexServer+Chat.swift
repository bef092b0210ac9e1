import DuplexSchema
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// A validated request to join a chat room.
struct ChatJoin: Sendable {
    var room: String
    var name: String
    var since: Int?
    /// The resume token the member presented, if any.
    var token: String?
    /// The epoch `since` counts in, if the member gave one.
    var epoch: String?
}

extension DuplexServer {
    /// Validates `room`, `name`, `since` and `token` of a chat request. It creates no room:
    /// rooms are created by the members and watchers who join them.
    func chatJoin(_ request: Request, _ context: DuplexRequestContext) -> Result<ChatJoin, Refusal> {
        chatJoin(request, room: context.parameters.get("room") ?? "")
    }

    /// ``chatJoin(_:_:)`` for the room named `roomName`.
    func chatJoin(_ request: Request, room roomName: String) -> Result<ChatJoin, Refusal> {
        let limits = configuration.chatLimits
        do throws(ChatProtocolError) {
            try limits.validate(room: roomName)
            guard let name = request.uri.queryParameters.get("name") else {
                throw ChatProtocolError(.invalidName, "the query parameter name is required, as in ?name=alice")
            }
            try limits.validate(name: name)
            var since: Int?
            if let text = request.uri.queryParameters.get("since") {
                guard let value = Int(text), value >= 0 else {
                    throw ChatProtocolError(.invalidSince, "since must be a non-negative integer seq (got \(text.prefix(32).debugDescription))")
                }
                since = value
            }
            let token = request.uri.queryParameters.get("token").map { String($0) }
            if let token { try limits.validate(token: token) }
            let epoch = request.uri.queryParameters.get("epoch").map { String($0) }
            if let epoch { try limits.validate(epoch: epoch) }
            return .success(ChatJoin(room: roomName, name: name, since: since, token: token, epoch: epoch))
        } catch {
            return .failure(Refusal(status: .badRequest, error: error))
        }
    }

    /// The refusal for a room that could not be joined.
    func refusal(_ reason: ChatRooms.Refusal, name: String) -> Refusal {
        switch reason {
        case .roomLimit:
            Refusal(status: .serviceUnavailable, error: ChatProtocolError(.roomLimit, "the server holds its maximum of \(configuration.maxRooms) rooms, none of them empty"))
        case .nameTaken:
            Refusal(status: .conflict, error: ChatProtocolError(.nameTaken, "\(name) is already in the room; rejoin with its resumeToken as token=, or pick another name"))
        case .unavailable(let why):
            Refusal(status: .serviceUnavailable, error: ChatProtocolError(.storeUnavailable, "the room store is unavailable: \(why)"))
        }
    }

    /// A fresh resume token: 144 random bits, base64url.
    static func makeResumeToken() -> String {
        randomBase64URL(bytes: 18)
    }

    /// `WS /chat/{room}`: a member of a room.
    ///
    /// Sends `welcome`, then the events after `since` (when `epoch` is absent or the room's),
    /// then live events; answers each `say` with
    /// an `ack` (after the message itself) or an `error`, and keeps the connection open after
    /// errors. A member more than `outboundQueueLimit` frames or `outboundQueueBytes` bytes
    /// behind is closed with 1013 so that it reconnects with `since`. A join whose name is
    /// present without its token gets `name_taken` and 1008; past the room limit, `room_limit`
    /// and 1013.
    ///
    /// Frames go straight to the channel on its event loop (``ChannelTextWriter``); with
    /// permessage-deflate (`extensionsAnswer`), those of at least the threshold compressed, a
    /// room event's once for every member. swift-websocket's handler inflates what the member
    /// sends.
    func serveChat(_ join: ChatJoin, inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, channel: any Channel, outlet: FrameOutlet, extensionsAnswer: String?) async throws {
        let session = UUID().uuidString.lowercased()
        let token = join.token ?? Self.makeResumeToken()
        let drains = writerDrains.drains(for: channel.eventLoop)
        let agreement = deflateAgreement(extensionsAnswer)
        let queue = ChannelTextWriter(
            channel: channel,
            outlet: outlet,
            drains: drains,
            maxCount: configuration.outboundQueueLimit,
            maxBytes: configuration.outboundQueueBytes,
            deflate: agreement.map { WriterDeflate(agreement: $0, zlib: drains.zlib) }
        )
        let ending = NIOLockedValueBox<(WebSocketCloseCode, String)?>(nil)
        let subscriber = RoomSubscriber(
            member: .init(name: join.name, session: session, token: token),
            deliver: { event in queue.offer(event) },
            // What was not handed to the channel yet is dropped: the member resumes with since,
            // and the close must not wait on a reader that does not read.
            onOverflow: {
                ending.withLockedValue { $0 = $0 ?? (.tryAgainLater, "too far behind: reconnect with since") }
                queue.discard()
            },
            onReplaced: {
                ending.withLockedValue { $0 = $0 ?? (ChatProtocol.replacedCloseCode, "replaced by a newer connection of this member") }
                queue.discard()
            }
        )
        let joined: (ChatRoom, ChatRoom.Subscription)
        switch await rooms.subscribe(room: join.room, subscriber, since: join.since, epoch: join.epoch, deliverBacklog: false, prelude: nil) {
        case .success(let success):
            joined = success
        case .failure(.unavailable(let why)):
            // No error frame: a client that was in the room rejoins after a 1013, and one that
            // joins for the first time reads the code from the close reason.
            logger.warning("a join was refused: the room store is unavailable", metadata: ["room": "\(join.room)", "error": "\(why)"])
            try await outbound.close(WebSocketCloseCode.tryAgainLater.nio, reason: ChatErrorCode.storeUnavailable.rawValue)
            return
        case .failure(let reason):
            let refusal = self.refusal(reason, name: join.name)
            try await outbound.write(.text(refusal.frameJSON))
            try await outbound.close((reason == .roomLimit ? WebSocketCloseCode.tryAgainLater : .policyViolation).nio, reason: refusal.error.code.rawValue)
            return
        }
        let (room, subscription) = joined
        do {
            try await serveMember(join, session: session, token: token, room: room, subscription: subscription, subscriber: subscriber, queue: queue, ending: ending, inbound: inbound, outbound: outbound, channel: channel)
        } catch {
            await rooms.unsubscribe(subscription, member: subscriber.member, from: room)
            throw error
        }
        await rooms.unsubscribe(subscription, member: subscriber.member, from: room)
    }

    /// A joined member's connection: the welcome and backlog, then live events out and `say`s in.
    private func serveMember(
        _ join: ChatJoin,
        session: String,
        token: String,
        room: ChatRoom,
        subscription: ChatRoom.Subscription,
        subscriber: RoomSubscriber,
        queue: ChannelTextWriter,
        ending: NIOLockedValueBox<(WebSocketCloseCode, String)?>,
        inbound: WebSocketInboundStream,
        outbound: WebSocketOutboundWriter,
        channel: any Channel
    ) async throws {
        try await connections.withConnection(.init(kind: .webSocket, route: "chat", room: join.room)) { commands in
            let first = try Self.firstFrames(join, session: session, token: token, room: room, subscription: subscription)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    queue.start(with: first)
                    await queue.written()
                    if let (code, reason) = ending.withLockedValue({ $0 }) {
                        try await self.close(outbound: outbound, channel: channel, code: code, reason: reason)
                    }
                }
                group.addTask {
                    try await self.obey(commands, outbound: outbound, channel: channel, onStall: queue.stall(for:))
                }
                for try await message in inbound.messages(maxSize: configuration.maxMessageBytes) {
                    let reply: String?
                    do {
                        reply = try await self.reply(to: message, from: join.name, token: token, matchByName: join.token == nil, in: room)
                    } catch {
                        // Not recorded, or not known to be: no ack. The client rejoins and
                        // resends what is unacknowledged; a resend of a recorded one is a duplicate.
                        logger.warning("a message could not be recorded; closing the member with 1013", metadata: ["room": "\(join.room)", "error": "\(error)"])
                        ending.withLockedValue { $0 = $0 ?? (.tryAgainLater, ChatErrorCode.storeUnavailable.rawValue) }
                        queue.finish()
                        break
                    }
                    // After the room's events so far: an ack follows its message.
                    if let reply {
                        room.afterFanOut {
                            if !queue.offer(reply) { subscriber.onOverflow() }
                        }
                    }
                }
                queue.finish()
                group.cancelAll()
            }
        }
    }

    /// What a member gets first: the welcome, then the backlog its `since` asked for.
    static func firstFrames(_ join: ChatJoin, session: String, token: String, room: ChatRoom, subscription: ChatRoom.Subscription) throws -> [String] {
        let welcome = ChatServerFrame.welcome(
            ChatWelcome(
                session: session,
                room: join.room,
                name: join.name,
                members: subscription.members,
                latestSeq: subscription.latestSeq,
                oldestSeq: subscription.oldestSeq,
                resumeToken: token,
                epoch: room.epoch,
                recovered: subscription.recovered
            )
        )
        return try [welcome.jsonString()] + subscription.backlog.map(\.json)
    }

    /// The `ack` or `error` frame answering one message from a member.
    /// - Throws: ``ChatStoreUnavailable`` when the room store could not record a message.
    private func reply(to message: WebSocketMessage, from name: String, token: String, matchByName: Bool, in room: ChatRoom) async throws -> String? {
        let frame: ChatServerFrame
        switch message {
        case .binary:
            frame = .error(ChatErrorFrame(code: .binaryNotSupported, reason: "chat frames are JSON text messages"))
        case .text(let text):
            frame = try await Self.answer(text: text, from: name, token: token, matchByName: matchByName, in: room, store: rooms, limits: configuration.chatLimits)
        }
        return try? frame.jsonString()
    }

    static func answer(text: String, from name: String, token: String, matchByName: Bool, in room: ChatRoom, store: any ChatStore, limits: ChatLimits) async throws(ChatStoreUnavailable) -> ChatServerFrame {
        let say: ChatSay
        switch parseSay(text: text, limits: limits) {
        case .failure(let error): return error.frame
        case .success(let parsed): say = parsed
        }
        do {
            return ack(say, try await store.say(say, in: room, from: name, token: token, matchByName: matchByName))
        } catch let error as ChatStoreUnavailable {
            throw error
        } catch {
            return .error(ChatErrorFrame(code: .invalidFrame, reason: "the message could not be encoded", clientMessageID: say.clientMessageID))
        }
    }

    /// ``answer(text:from:token:matchByName:in:store:limits:)`` for a room of the in-memory
    /// store, which records a message at once: on the connection's event loop, with no task.
    static func answerNow(text: String, from name: String, token: String, matchByName: Bool, in room: ChatRoom, limits: ChatLimits) -> ChatServerFrame {
        switch parseSay(text: text, limits: limits) {
        case .failure(let error):
            return error.frame
        case .success(let say):
            do {
                return ack(say, try room.say(say, from: name, token: token, matchByName: matchByName))
            } catch {
                return .error(ChatErrorFrame(code: .invalidFrame, reason: "the message could not be encoded", clientMessageID: say.clientMessageID))
            }
        }
    }

    /// A frame that is not a valid `say`, as the error frame that answers it.
    struct SayRefusal: Error {
        var frame: ChatServerFrame
    }

    /// The `say` a member's text frame holds, within the limits; or the error frame answering it.
    static func parseSay(text: String, limits: ChatLimits) -> Result<ChatSay, SayRefusal> {
        let frame: ChatClientFrame
        do {
            frame = try ChatClientFrame.decode(Data(text.utf8))
        } catch {
            return .failure(SayRefusal(frame: .error(ChatErrorFrame(error))))
        }
        switch frame {
        case .say(let say):
            do throws(ChatProtocolError) {
                try limits.validate(messageID: say.clientMessageID)
                try limits.validate(text: say.text)
            } catch {
                return .failure(SayRefusal(frame: .error(ChatErrorFrame(error, clientMessageID: say.clientMessageID))))
            }
            return .success(say)
        }
    }

    /// The `ack` for a recorded `say`.
    static func ack(_ say: ChatSay, _ result: ChatRoom.SayResult) -> ChatServerFrame {
        switch result {
        case .accepted(let seq): .ack(ChatAck(clientMessageID: say.clientMessageID, seq: seq))
        case .duplicate(let seq): .ack(ChatAck(clientMessageID: say.clientMessageID, seq: seq, duplicate: true))
        }
    }
}

extension ChannelTextWriter {
    /// Accepts a room event: its shared frame (and shared compressed frame) when it has them;
    /// false when the member is too far behind or finished. A message is written at once on the
    /// writer's loop; presence waits for the loop's batch (see ``offer(frame:textBytes:deflated:batched:)``).
    func offer(_ event: RoomEvent) -> Bool {
        if let frame = event.frame {
            return offer(frame: frame, textBytes: event.json.utf8.count, deflated: event.deflated, batched: event.type != "message")
        }
        return offer(event.json)
    }
}
