import DequeModule
import DuplexSchema
import Foundation
import NIOConcurrencyHelpers

/// One room event as the server keeps and sends it: encoded once, sent to every subscriber.
struct RoomEvent: Sendable {
    /// The event's place in the room sequence.
    var seq: Int
    /// "message", "joined" or "left": the frame type and the SSE event name.
    var type: String
    /// The frame as JSON text.
    var json: String
    /// For a message: the key that makes a repeated `say` idempotent.
    var dedupeKey: String?
}

/// Someone who receives a room's events: a WebSocket member, or an SSE observer.
struct RoomSubscriber: Sendable {
    /// The member's name and session, or nil for an observer, who is not present in the room.
    var member: (name: String, session: String)?
    /// Queues an event for the subscriber; returns false when its queue is full.
    var deliver: @Sendable (RoomEvent) -> Bool
    /// Called, outside the room's lock, when the subscriber was removed for falling behind.
    var onOverflow: @Sendable () -> Void
}

/// A chat room: a numbered sequence of events (messages and presence), the last `historyLimit`
/// of them kept for resumes, and the subscribers that receive new ones.
///
/// Every change happens under one lock, and events are queued to subscribers under that lock,
/// so every subscriber sees events in seq order, and a join or subscribe that takes a backlog
/// snapshot and registers in the same critical section gets no gap and no duplicate.
final class ChatRoom: Sendable {
    let name: String
    private let historyLimit: Int

    private struct State {
        var latestSeq = 0
        var history = Deque<RoomEvent>()
        /// Message dedupe keys still in history, and their seqs.
        var acceptedMessages: [String: Int] = [:]
        var subscribers: [UInt64: Slot] = [:]
        var nextSubscriberID: UInt64 = 0
    }

    /// A subscriber, and whether it fell behind: a stalled one gets no more events and is
    /// expected to disconnect, which removes it.
    private struct Slot {
        var subscriber: RoomSubscriber
        var stalled = false
    }

    private let state = NIOLockedValueBox(State())

    init(name: String, historyLimit: Int) {
        self.name = name
        self.historyLimit = max(historyLimit, 0)
    }

    /// The outcome of a `say`.
    enum SayResult: Sendable, Equatable {
        case accepted(seq: Int)
        case duplicate(seq: Int)
    }

    /// What a subscriber gets when it starts: the events after its `since`, then live ones.
    struct Subscription: Sendable {
        var id: UInt64
        var backlog: [RoomEvent]
        var latestSeq: Int
        var oldestSeq: Int?
        var members: [String]
    }

    /// Adds a member or observer and returns the events after `since` (none when nil).
    /// A member's arrival is broadcast as a `joined` event, to itself as well.
    ///
    /// With `deliverBacklog`, the backlog goes through the subscriber's `deliver` under the
    /// room's lock, ahead of any live event, and the returned backlog is empty. Without it, the
    /// caller must send the returned backlog before the events it receives through `deliver`.
    func subscribe(_ subscriber: RoomSubscriber, since: Int?, deliverBacklog: Bool = false) -> Subscription {
        let (subscription, overflowed) = state.withLockedValue { state -> (Subscription, [RoomSubscriber]) in
            state.nextSubscriberID += 1
            let id = state.nextSubscriberID
            var backlog = since.map { since in state.history.filter { $0.seq > since } } ?? []
            var slot = Slot(subscriber: subscriber)
            if deliverBacklog {
                slot.stalled = !backlog.allSatisfy { subscriber.deliver($0) }
                backlog = []
            }
            state.subscribers[id] = slot
            var subscription = Subscription(
                id: id,
                backlog: backlog,
                latestSeq: state.latestSeq,
                oldestSeq: state.history.first?.seq,
                members: Self.memberNames(state.subscribers)
            )
            var overflowed: [RoomSubscriber] = []
            if let member = subscriber.member {
                overflowed = Self.append(presence: "joined", name: member.name, session: member.session, room: name, to: &state, limit: historyLimit)
                subscription.members = Self.memberNames(state.subscribers)
            }
            return (subscription, overflowed)
        }
        for subscriber in overflowed { subscriber.onOverflow() }
        return subscription
    }

    /// Removes a subscriber; a member's departure is broadcast as a `left` event.
    func unsubscribe(_ id: UInt64) {
        let overflowed = state.withLockedValue { state -> [RoomSubscriber] in
            guard let removed = state.subscribers.removeValue(forKey: id), let member = removed.subscriber.member else { return [] }
            return Self.append(presence: "left", name: member.name, session: member.session, room: name, to: &state, limit: historyLimit)
        }
        for subscriber in overflowed { subscriber.onOverflow() }
    }

    /// Posts a message. A repeated client message id from the same name, while the original is
    /// still in history, returns the original seq and broadcasts nothing.
    func say(_ say: ChatSay, from name: String, at date: Date = Date()) throws -> SayResult {
        let key = "\(name)\n\(say.clientMessageID)"
        let (result, overflowed) = try state.withLockedValue { state -> (SayResult, [RoomSubscriber]) in
            if let seq = state.acceptedMessages[key] {
                return (.duplicate(seq: seq), [])
            }
            let seq = state.latestSeq + 1
            let frame = ChatServerFrame.message(
                ChatMessage(room: self.name, seq: seq, clientMessageID: say.clientMessageID, from: name, text: say.text, sentAt: date)
            )
            let event = RoomEvent(seq: seq, type: "message", json: try frame.jsonString(), dedupeKey: key)
            return (.accepted(seq: seq), Self.append(event, to: &state, limit: historyLimit))
        }
        for subscriber in overflowed { subscriber.onOverflow() }
        return result
    }

    /// The number of subscribers, members and observers.
    var subscriberCount: Int { state.withLockedValue { $0.subscribers.count } }

    private static func memberNames(_ subscribers: [UInt64: Slot]) -> [String] {
        subscribers.values.compactMap(\.subscriber.member?.name).sorted()
    }

    private static func append(
        presence type: String,
        name: String,
        session: String,
        room: String,
        to state: inout State,
        limit: Int
    ) -> [RoomSubscriber] {
        let seq = state.latestSeq + 1
        let presence = ChatPresence(room: room, seq: seq, name: name, session: session, at: Date())
        let frame: ChatServerFrame = type == "joined" ? .joined(presence) : .left(presence)
        // Encoding these plain values cannot fail; a failure would be a bug in the schema.
        let json = (try? frame.jsonString()) ?? #"{"type":"\#(type)","v":1}"#
        return append(RoomEvent(seq: seq, type: type, json: json), to: &state, limit: limit)
    }

    /// Appends an event to the history and queues it to every subscriber. Subscribers whose
    /// queue is full are marked stalled and returned, to be told outside the lock.
    private static func append(_ event: RoomEvent, to state: inout State, limit: Int) -> [RoomSubscriber] {
        state.latestSeq = event.seq
        if limit > 0 {
            state.history.append(event)
            if let key = event.dedupeKey { state.acceptedMessages[key] = event.seq }
            while state.history.count > limit, let evicted = state.history.popFirst() {
                if let key = evicted.dedupeKey { state.acceptedMessages.removeValue(forKey: key) }
            }
        }
        var overflowed: [RoomSubscriber] = []
        for (id, slot) in state.subscribers where !slot.stalled && !slot.subscriber.deliver(event) {
            state.subscribers[id]?.stalled = true
            overflowed.append(slot.subscriber)
        }
        return overflowed
    }
}

/// The server's chat rooms, created on first use, at most `maxRooms` of them.
final class ChatRooms: Sendable {
    private let historyLimit: Int
    private let maxRooms: Int
    private let rooms = NIOLockedValueBox([String: ChatRoom]())

    init(historyLimit: Int, maxRooms: Int) {
        self.historyLimit = historyLimit
        self.maxRooms = maxRooms
    }

    /// The room with this name, created if needed; nil when creating it would exceed the limit.
    func room(named name: String) -> ChatRoom? {
        rooms.withLockedValue { rooms in
            if let room = rooms[name] { return room }
            guard rooms.count < maxRooms else { return nil }
            let room = ChatRoom(name: name, historyLimit: historyLimit)
            rooms[name] = room
            return room
        }
    }
}
