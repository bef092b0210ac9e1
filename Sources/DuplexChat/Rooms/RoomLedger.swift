import DequeModule
package import DuplexSchema
package import Foundation
import OrderedCollections

/// What a chat room decides, as a value: its sequence, its history and the history's bounds,
/// message dedupe, who is present under which name, and eviction.
///
/// It holds no lock, no subscriber's queue and no event loop, so every rule is tested without a
/// socket (`RoomLedgerTests`). ``ChatRoom`` keeps one under its lock and carries out what it
/// answers: the ``Step``s of a join (subscribers replaced, events published, the new subscriber
/// added, in that order), the event a `say` or a departure publishes, the subscribers a
/// replica's events or its restart end. Clocks come in as arguments.
package struct RoomLedger: Sendable {
    /// The room's name, as its events carry it.
    package let room: String
    /// The room's epoch (``ChatRoom/epoch``).
    package let epoch: String
    /// Who numbers a room's events.
    package enum Sequencing: Sendable, Equatable {
        /// The room itself, under its lock: the in-memory store.
        case local
        /// A shared store; the room applies its events with ``ChatRoom/apply(_:)``.
        case external
    }

    /// Who numbers the events: this room (memory), or a shared store (a replica).
    package let sequencing: Sequencing
    /// At most this many events are kept (0: none, and no message is deduplicated).
    package let historyLimit: Int
    /// At most this many bytes of events are kept.
    package let historyBytesLimit: Int
    /// The bytes every room of the server may keep together.
    package let budget: HistoryBudget

    /// The latest seq numbered or applied.
    private(set) var latestSeq = 0
    /// The newest events, oldest first.
    private(set) var history = Deque<RoomEvent>()
    /// The bytes of `history`.
    private(set) var historyBytes = 0
    /// Message dedupe keys still in history, and their seqs.
    private(set) var acceptedMessages: [String: Int] = [:]
    /// Who is subscribed, in the order they subscribed: a member's identity, or nil for an
    /// observer (an SSE stream, not present in the room).
    private(set) var roster: OrderedDictionary<UInt64, RoomSubscriber.Member?> = [:]
    /// How many of the roster are observers: an event's SSE text is made only when there is one.
    private(set) var observers = 0
    private var lastSubscriberID: UInt64 = 0
    /// When the room last changed: the least recently used empty room is evicted first.
    private(set) var lastActive: ContinuousClock.Instant
    /// Evicted from the server's rooms: no one may subscribe any more.
    private(set) var evicted = false

    package init(
        room: String,
        epoch: String,
        sequencing: Sequencing,
        historyLimit: Int,
        historyBytesLimit: Int,
        budget: HistoryBudget,
        now: ContinuousClock.Instant = .now
    ) {
        self.room = room
        self.epoch = epoch
        self.sequencing = sequencing
        self.historyLimit = max(historyLimit, 0)
        self.historyBytesLimit = max(historyBytesLimit, 0)
        self.budget = budget
        self.lastActive = now
    }

    /// What the room does for a join, in order.
    package enum Step: Sendable {
        /// Remove this subscriber, whom a newer connection of the same member replaces, and
        /// tell it so.
        case replace(UInt64)
        /// Deliver this event, numbered and kept, to every subscriber present now.
        case publish(RoomEvent)
        /// Add the new subscriber: it gets what is published after this, not before.
        case add(UInt64)
    }

    /// A subscriber accepted.
    package struct Admission: Sendable {
        var id: UInt64
        var steps: [Step]
        /// The events after `since` when it is added (none without `since`).
        var backlog: [RoomEvent]
        /// The latest seq when it is added, and the oldest kept then.
        var latestSeq: Int
        var oldestSeq: Int?
        /// The names of the members present once it joined, sorted.
        var members: [String]
        /// Whether `since` was honoured: nil without one, false when its epoch was another.
        var recovered: Bool?
    }

    /// Adds a member (or, with nil, an observer) that has seen the events up to `since` of
    /// `epoch`. A position in another epoch is in a lost history: the subscriber gets every
    /// event kept, and the admission says it was not recovered.
    ///
    /// In a room that numbers its own events, a name is unique among the members present: a
    /// member with another token is refused, one with the same token replaces the connections
    /// of that name, each leaving first; the member's arrival is published as `joined`, to
    /// itself as well. A replica leaves names and presence to its store.
    package mutating func join(
        _ member: RoomSubscriber.Member?,
        since requested: Int?,
        epoch asked: String? = nil,
        now: ContinuousClock.Instant = .now,
        date: Date = Date()
    ) -> Result<Admission, ChatRoom.Refusal> {
        guard !evicted else { return .failure(.evicted) }
        let recovered: Bool? = requested == nil ? nil : (asked == nil || asked == epoch)
        let since = recovered == false ? 0 : requested
        var steps: [Step] = []
        if let member, sequencing == .local {
            let present = roster.filter { $0.value?.name == member.name }
            guard present.allSatisfy({ $0.value?.token == member.token }) else { return .failure(.nameTaken) }
            for (id, old) in present {
                roster.removeValue(forKey: id)
                steps.append(.replace(id))
                if let old { steps.append(.publish(presence(.left, of: old, now: now, date: date))) }
            }
        }
        lastActive = now
        lastSubscriberID += 1
        let id = lastSubscriberID
        let backlog = since.map { since in history.filter { $0.seq > since } } ?? []
        let (latest, oldest) = (latestSeq, history.first?.seq)
        roster[id] = .some(member)
        if member == nil { observers += 1 }
        steps.append(.add(id))
        if let member, sequencing == .local {
            steps.append(.publish(presence(.joined, of: member, now: now, date: date)))
        }
        return .success(
            Admission(id: id, steps: steps, backlog: backlog, latestSeq: latest, oldestSeq: oldest, members: memberNames, recovered: recovered))
    }

    /// Removes a subscriber. Returns whether it was subscribed, and the `left` event a member's
    /// departure publishes in a room that numbers its own events.
    package mutating func leave(_ id: UInt64, now: ContinuousClock.Instant = .now, date: Date = Date()) -> (removed: Bool, left: RoomEvent?) {
        guard let removed = roster.removeValue(forKey: id) else { return (false, nil) }
        lastActive = now
        guard let member = removed else {
            observers -= 1
            return (true, nil)
        }
        guard sequencing == .local else { return (true, nil) }
        return (true, presence(.left, of: member, now: now, date: date))
    }

    /// What a `say` comes to.
    package enum SayDecision: Sendable {
        /// A resend of a message still in history: its seq, and nothing published.
        case duplicate(seq: Int)
        /// A new message, numbered and kept: publish it.
        case accepted(RoomEvent)
    }

    /// A member's message. A client message id the same member sent before, while that message
    /// is still in history, is a duplicate.
    ///
    /// The same member means the same resume token. A connection that presented no token (a
    /// client that predates tokens, or a first join) is also matched by name (`matchByName`); a
    /// connection that presented its token is matched by the token only, so no one else can
    /// claim its ids.
    /// - Throws: when the message cannot be encoded.
    package mutating func say(
        _ say: ChatSay,
        from name: String,
        token: String,
        matchByName: Bool = false,
        now: ContinuousClock.Instant = .now,
        date: Date = Date()
    ) throws -> SayDecision {
        let keys = RoomEvent.DedupeKeys(say, from: name, token: token)
        if let seq = acceptedMessages[keys.byToken] ?? (matchByName ? acceptedMessages[keys.byName] : nil) {
            return .duplicate(seq: seq)
        }
        let seq = latestSeq + 1
        let frame = RoomEvent.messageFrame(room: room, seq: seq, say, from: name, at: date)
        let event = RoomEvent(seq: seq, type: "message", json: try frame.jsonString(), epoch: epoch, dedupeKeys: keys.all)
        record(event, now: now)
        return .accepted(event)
    }

    /// What a replica does with an event its store numbered.
    package enum Application: Sendable {
        /// Applied before: skip it.
        case old
        /// Past the next seq: the events between are missing; apply nothing from here.
        case gap
        /// Applied: publish it; a `left` for a connection subscribed here ends that one
        /// (`replaced`: by a newer connection of the member, else it is gone).
        case applied(ending: (id: UInt64, replaced: Bool)?)
    }

    /// Applies an event a shared store numbered, in seq order (``ChatRoom/apply(_:)``).
    package mutating func apply(_ event: RoomEvent, now: ContinuousClock.Instant = .now) -> Application {
        guard event.seq > latestSeq else { return .old }
        guard event.seq == latestSeq + 1 else { return .gap }
        var ending: (UInt64, Bool)?
        if let departure = event.departure, let id = roster.first(where: { $0.value?.session == departure.session })?.key {
            roster.removeValue(forKey: id)
            ending = (id, departure.replaced)
        }
        record(event, now: now)
        return .applied(ending: ending)
    }

    /// Starts a replica's history again at `latestSeq` with `events`: every subscriber is ended
    /// (returned, in order), since what they had seen is no longer continuous with what is kept.
    package mutating func restart(at latestSeq: Int, with events: [RoomEvent], now: ContinuousClock.Instant = .now) -> [UInt64] {
        let ended = Array(roster.keys)
        roster = [:]
        observers = 0
        clearHistory()
        self.latestSeq = max(latestSeq, events.last?.seq ?? 0)
        for event in events { record(event, now: now) }
        return ended
    }

    /// Evicts the room if it is empty (or in any case, with `force`): no one may subscribe any
    /// more, and its history is released. Returns whether it was evicted now.
    package mutating func evict(force: Bool = false) -> Bool {
        guard force || roster.isEmpty, !evicted else { return false }
        evicted = true
        clearHistory()
        return true
    }

    /// Numbers nothing: keeps `event` (already numbered) in the history, within the history's
    /// bounds and the server's budget, dropping the oldest events (and their dedupe keys) past
    /// them.
    package mutating func record(_ event: RoomEvent, now: ContinuousClock.Instant = .now) {
        latestSeq = event.seq
        lastActive = now
        guard historyLimit > 0 else { return }
        history.append(event)
        historyBytes += event.bytes
        for key in event.dedupeKeys { acceptedMessages[key] = event.seq }
        var overBudget = budget.add(event.bytes)
        while history.count > historyLimit || historyBytes > historyBytesLimit || overBudget, let dropped = history.popFirst() {
            historyBytes -= dropped.bytes
            overBudget = budget.release(dropped.bytes)
            for key in dropped.dedupeKeys where acceptedMessages[key] == dropped.seq {
                acceptedMessages.removeValue(forKey: key)
            }
        }
    }

    /// The names of the members present, sorted.
    var memberNames: [String] {
        roster.values.compactMap { $0?.name }.sorted()
    }

    /// The sessions of the members present.
    package var memberSessions: [String] {
        roster.values.compactMap { $0?.session }
    }

    private enum Presence: String {
        case joined, left
    }

    /// Numbers and keeps a member's `joined` or `left`.
    private mutating func presence(_ kind: Presence, of member: RoomSubscriber.Member, now: ContinuousClock.Instant, date: Date) -> RoomEvent {
        let seq = latestSeq + 1
        let presence = ChatPresence(room: room, seq: seq, name: member.name, session: member.session, at: date)
        let frame: ChatServerFrame = kind == .joined ? .joined(presence) : .left(presence)
        // Encoding these plain values cannot fail; a failure would be a bug in the schema.
        let json = (try? frame.jsonString()) ?? #"{"type":"\#(kind.rawValue)","v":1}"#
        let event = RoomEvent(seq: seq, type: kind.rawValue, json: json, epoch: epoch)
        record(event, now: now)
        return event
    }

    private mutating func clearHistory() {
        _ = budget.release(historyBytes)
        history = []
        historyBytes = 0
        acceptedMessages = [:]
    }
}
