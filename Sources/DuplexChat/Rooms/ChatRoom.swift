import DuplexHost
import DequeModule
package import DuplexSchema
package import Foundation
package import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import OrderedCollections

/// A chat room: a numbered sequence of events (messages and presence), the newest of them kept
/// for resumes (at most `historyLimit` events and `historyBytesLimit` bytes, and within the
/// server's ``HistoryBudget``), and the subscribers that receive new ones.
///
/// What the room decides (numbering, history, dedupe, names, eviction) is a ``RoomLedger``, a
/// value it keeps under its lock; the room carries out the ledger's answers: it adds and removes
/// subscribers' queues and delivers events to them.
///
/// Every change happens under one lock: an event is numbered, kept, and put in the room's outbox
/// with the subscribers present at that moment, so a join or subscribe that takes a backlog
/// snapshot and registers in the same critical section gets no gap and no duplicate. The outbox
/// is delivered outside the lock, by one thread at a time (the one that found it idle), in
/// order: every subscriber sees events in seq order, and a fan-out to 1,000 members neither
/// holds the lock while it writes nor waits for the lock before its first write. Whatever must
/// follow the events numbered so far (a `say`'s ack) goes through ``afterFanOut(_:)``.
///
/// Names are unique among the members present: a second connection with a present name must
/// present that member's resume token, and then replaces the older connection (which gets
/// ``ChatProtocol/replacedCloseCode``). Message ids are scoped by the token, so another
/// connection cannot claim a member's ids.
///
/// A room is ``RoomLedger/Sequencing-swift.enum/local`` (the in-memory store: it numbers its events itself)
/// or ``RoomLedger/Sequencing-swift.enum/external`` (a replica of a room kept in PostgreSQL: the store
/// numbers events, checks names and records presence, and the room only applies the events it
/// is given, in seq order, to its subscribers and its history cache).
package final class ChatRoom: Sendable {
    package let name: String
    /// The room's epoch: new for every room object, so new whenever the history behind the seqs
    /// may be gone (a new process, an eviction, an amnesiac restart). A replica takes the
    /// store's epoch, which outlives processes.
    package let epoch: String

    package struct State {
        /// What the room decides: its sequence, history, dedupe and who is present.
        var ledger: RoomLedger
        /// The subscribers' queues, in the ledger's roster order: a fan-out reaches the earliest
        /// members first.
        var slots: OrderedDictionary<UInt64, Slot> = [:]
        /// Events numbered but not yet delivered, each with the subscribers it goes to, and
        /// actions to run after them, in order.
        var outbox = Deque<Outgoing>()
        /// Whether a thread is delivering the outbox: whoever finds it false delivers.
        var fanningOut = false
        /// Tasks waiting for a seq to be applied (external sequencing), by id.
        var seqWaiters: [UInt64: (seq: Int, continuation: CheckedContinuation<Bool, Never>)] = [:]
        var nextWaiterID: UInt64 = 0
    }

    /// A subscriber, and whether it fell behind: a stalled one gets no more events and is
    /// expected to disconnect, which removes it.
    ///
    /// A class, so that a fan-out to 1,000 subscribers shares one array of references rather
    /// than copying every subscriber's closures and strings. `stalled` is set before the slot
    /// is added (under the lock), then only by the thread delivering the outbox, which takes
    /// over from the previous one through the lock (`@unchecked` for that reason).
    package final class Slot: @unchecked Sendable {
        let id: UInt64
        let subscriber: RoomSubscriber
        var stalled = false

        init(id: UInt64, subscriber: RoomSubscriber) {
            self.id = id
            self.subscriber = subscriber
        }
    }

    /// What the outbox holds: an event and the subscribers present when it was numbered, or an
    /// action to run once everything before it is delivered.
    package enum Outgoing {
        case event(RoomEvent, [Slot])
        case action(@Sendable () -> Void)
    }

    package let state: NIOLockedValueBox<State>

    package init(name: String, historyLimit: Int, historyBytesLimit: Int = .max, budget: HistoryBudget = HistoryBudget(limit: .max)) {
        self.name = name
        self.epoch = Self.makeEpoch()
        let ledger = RoomLedger(
            room: name, epoch: epoch, sequencing: .local, historyLimit: historyLimit, historyBytesLimit: historyBytesLimit, budget: budget)
        self.state = NIOLockedValueBox(State(ledger: ledger))
    }

    /// A replica of a room a shared store numbers: its epoch, latest seq and newest events as
    /// the store holds them (events in seq order, the last at most `latestSeq`).
    package init(
        replicaOf name: String,
        epoch: String,
        latestSeq: Int,
        history: [RoomEvent],
        historyLimit: Int,
        historyBytesLimit: Int = .max,
        budget: HistoryBudget = HistoryBudget(limit: .max)
    ) {
        self.name = name
        self.epoch = epoch
        var ledger = RoomLedger(
            room: name, epoch: epoch, sequencing: .external, historyLimit: historyLimit, historyBytesLimit: historyBytesLimit, budget: budget)
        _ = ledger.restart(at: latestSeq, with: history)
        self.state = NIOLockedValueBox(State(ledger: ledger))
    }

    /// The outcome of a `say`.
    package enum SayResult: Sendable, Equatable {
        case accepted(seq: Int)
        case duplicate(seq: Int)
    }

    /// What a subscriber gets when it starts: the events after its `since`, then live ones.
    package struct Subscription: Sendable {
        package var id: UInt64
        package var backlog: [RoomEvent]
        package var latestSeq: Int
        package var oldestSeq: Int?
        package var members: [String]
        /// Whether `since` was honoured: nil without one, false when its epoch was another.
        package var recovered: Bool?
    }

    /// A fresh epoch: 72 random bits, base64url.
    package static func makeEpoch() -> String {
        randomBase64URL(bytes: 9)
    }

    /// Why a subscriber was not added.
    package enum Refusal: Error, Equatable {
        /// A member of that name is present, with another token.
        case nameTaken
        /// The room was evicted between finding and joining it.
        case evicted
    }

    /// Adds a member or observer and returns the events after `since` (none when nil). When
    /// `epoch` is given and is not the room's, `since` counts in a lost history: the subscriber
    /// gets every kept event of this epoch instead, and the subscription says it was not
    /// recovered.
    /// A member's arrival is broadcast as a `joined` event, to itself as well; a member that
    /// replaces an older connection of its own makes that one leave first.
    ///
    /// With `deliverBacklog`, the backlog goes through the subscriber's `deliver` under the
    /// room's lock, ahead of any live event, and the returned backlog is empty. Without it, the
    /// caller must send the returned backlog before the events it receives through `deliver`.
    ///
    /// `prelude`, when given, runs under the room's lock once the subscriber is accepted, before
    /// any event reaches it, with whether `since` was recovered, the room's epoch and latest seq:
    /// a room SSE stream announces a history reset there, ahead of every event.
    package func subscribe(
        _ subscriber: RoomSubscriber,
        since requested: Int?,
        epoch: String? = nil,
        deliverBacklog: Bool = false,
        prelude: ((_ recovered: Bool?, _ epoch: String, _ latestSeq: Int) -> Void)? = nil
    ) -> Result<Subscription, Refusal> {
        var replaced: [RoomSubscriber] = []
        var claimed = false
        let result = state.withLockedValue { state -> Result<Subscription, Refusal> in
            defer { claimed = Self.claimFanOut(&state) }
            let admission: RoomLedger.Admission
            switch state.ledger.join(subscriber.member, since: requested, epoch: epoch) {
            case .failure(let refusal): return .failure(refusal)
            case .success(let admitted): admission = admitted
            }
            for step in admission.steps {
                switch step {
                case .replace(let id):
                    if let slot = state.slots.removeValue(forKey: id) { replaced.append(slot.subscriber) }
                case .publish(let event):
                    Self.enqueue(event, in: &state)
                case .add(let id):
                    prelude?(admission.recovered, self.epoch, admission.latestSeq)
                    let slot = Slot(id: id, subscriber: subscriber)
                    if deliverBacklog {
                        slot.stalled = !admission.backlog.isEmpty && !subscriber.deliver(admission.backlog)
                    }
                    state.slots[id] = slot
                }
            }
            return .success(
                Subscription(
                    id: admission.id,
                    backlog: deliverBacklog ? [] : admission.backlog,
                    latestSeq: admission.latestSeq,
                    oldestSeq: admission.oldestSeq,
                    members: admission.members,
                    recovered: admission.recovered
                )
            )
        }
        for subscriber in replaced { subscriber.onReplaced() }
        if claimed { fanOut() }
        return result
    }

    /// Removes a subscriber; a member's departure is broadcast as a `left` event.
    package func unsubscribe(_ id: UInt64) {
        let claimed = state.withLockedValue { state -> Bool in
            state.slots.removeValue(forKey: id)
            guard let left = state.ledger.leave(id).left else { return false }
            Self.enqueue(left, in: &state)
            return Self.claimFanOut(&state)
        }
        if claimed { fanOut() }
    }

    /// Posts a message. A repeated client message id from the same member, while the original
    /// is still in history, returns the original seq and broadcasts nothing.
    ///
    /// The same member means the same resume token. A connection that presented no token (a
    /// client that predates tokens, or a first join) is also matched by name, as before tokens;
    /// a connection that presented its token is matched by the token only, so no one else can
    /// claim its ids.
    package func say(_ say: ChatSay, from name: String, token: String, matchByName: Bool = false, at date: Date = Date()) throws -> SayResult {
        let (result, claimed) = try state.withLockedValue { state -> (SayResult, Bool) in
            switch try state.ledger.say(say, from: name, token: token, matchByName: matchByName, date: date) {
            case .duplicate(let seq):
                return (.duplicate(seq: seq), false)
            case .accepted(let event):
                Self.enqueue(event, in: &state)
                return (.accepted(seq: event.seq), Self.claimFanOut(&state))
            }
        }
        if claimed { fanOut() }
        return result
    }

    /// The latest seq applied.
    package var latestSeq: Int { state.withLockedValue { $0.ledger.latestSeq } }

    /// The sessions of the members subscribed here.
    package var memberSessions: [String] { state.withLockedValue { $0.ledger.memberSessions } }

    /// The number of subscribers, members and observers.
    package var subscriberCount: Int { state.withLockedValue { $0.ledger.roster.count } }

    /// The events and bytes of history kept.
    package var historySize: (events: Int, bytes: Int) { state.withLockedValue { ($0.ledger.history.count, $0.ledger.historyBytes) } }

    /// When the room is empty, how long ago it was last used; nil while anyone is subscribed.
    package var idleSince: ContinuousClock.Instant? {
        state.withLockedValue { $0.ledger.roster.isEmpty ? $0.ledger.lastActive : nil }
    }

    /// Evicts the room if it is empty (or in any case, with `force`): no one may subscribe any
    /// more, and its history is released. Returns whether it was evicted.
    package func evictIfEmpty(force: Bool = false) -> Bool {
        state.withLockedValue { $0.ledger.evict(force: force) }
    }

    /// Puts `event` in the outbox for every subscriber present (``fanOut()`` delivers it), with
    /// its frame encoded once for all of them, and its SSE text when an observer is present.
    package static func enqueue(_ event: RoomEvent, in state: inout State) {
        guard !state.slots.isEmpty else { return }
        var live = event
        live.frame = ServerTextFrame.encode(event.json)
        live.deflated = DeflatedFrameCache()
        if state.ledger.observers > 0 { live.sse = live.sseText }
        state.outbox.append(.event(live, state.slots.values.elements))
    }

    /// Runs `body` once every event numbered so far has been offered to its subscribers: at
    /// once, on the caller's thread, when nothing is waiting to be delivered; else on the thread
    /// delivering, right after them. A `say`'s ack goes through here, so that it follows the
    /// message itself to the sender even while another thread delivers the room's events.
    package func afterFanOut(_ body: @escaping @Sendable () -> Void) {
        let now = state.withLockedValue { state -> Bool in
            guard state.fanningOut else { return true }
            state.outbox.append(.action(body))
            return false
        }
        if now { body() }
    }

    /// Whether two events go to the same subscribers: the same slots, in the same order (two
    /// events numbered with no join or leave between share the array itself).
    private static func same(_ one: [Slot], _ other: [Slot]) -> Bool {
        one.count == other.count && zip(one, other).allSatisfy { $0 === $1 }
    }

    /// How many outbox batches a delivering event loop takes in one turn.
    package static let fanOutBatchesPerTurn = 64

    /// Whether the caller, who just put something in the outbox, is to deliver it (nobody is);
    /// marks the outbox as being delivered.
    static func claimFanOut(_ state: inout State) -> Bool {
        guard !state.outbox.isEmpty, !state.fanningOut else { return false }
        state.fanningOut = true
        return true
    }

    /// Delivers the outbox, in order, outside the lock, until it is empty; called by the thread
    /// that claimed it. A subscriber whose queue is full is marked stalled, gets nothing more,
    /// and is told (if it is still subscribed: one that left or was replaced was told already).
    ///
    /// On an event loop, after ``fanOutBatchesPerTurn`` batches it goes on in a later turn of the
    /// loop (still the only one delivering), so that a room kept busy from other loops does not
    /// keep this loop from its own connections.
    func fanOut() {
        var batches = 0
        while true {
            batches += 1
            if batches > Self.fanOutBatchesPerTurn, let loop = MultiThreadedEventLoopGroup.currentEventLoop {
                loop.execute { self.fanOut() }
                return
            }
            let batch = state.withLockedValue { state -> Deque<Outgoing> in
                let batch = state.outbox
                state.outbox = []
                if batch.isEmpty { state.fanningOut = false }
                return batch
            }
            if batch.isEmpty { return }
            var refused: [Slot] = []
            var index = batch.startIndex
            while index < batch.endIndex {
                switch batch[index] {
                case .action(let body):
                    body()
                    index += 1
                case .event(_, let slots):
                    // The events in a row that go to the same subscribers go to each of them
                    // together: one write per member for a batch a shared store committed.
                    var group: [RoomEvent] = []
                    while index < batch.endIndex, case .event(let event, let others) = batch[index], Self.same(others, slots) {
                        group.append(event)
                        index += 1
                    }
                    for slot in slots where !slot.stalled && !slot.subscriber.deliver(group) {
                        slot.stalled = true
                        refused.append(slot)
                    }
                }
            }
            guard !refused.isEmpty else { continue }
            let overflowed = state.withLockedValue { state in
                refused.filter { state.slots[$0.id] === $0 }.map(\.subscriber)
            }
            for subscriber in overflowed { subscriber.onOverflow() }
        }
    }
}
