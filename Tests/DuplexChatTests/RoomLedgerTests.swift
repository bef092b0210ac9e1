import DequeModule
import DuplexSchema
import Foundation
import OrderedCollections
import Testing

@testable import DuplexChat

/// What a room decides, as a value: no lock, no subscriber, no clock but the one passed in.
@Suite("RoomLedger")
struct RoomLedgerTests {
    static let start = ContinuousClock.now

    static func ledger(
        _ sequencing: RoomLedger.Sequencing = .local,
        historyLimit: Int = 100,
        historyBytesLimit: Int = .max,
        budget: HistoryBudget = HistoryBudget(limit: .max)
    ) -> RoomLedger {
        RoomLedger(
            room: "lobby", epoch: "E1", sequencing: sequencing, historyLimit: historyLimit, historyBytesLimit: historyBytesLimit, budget: budget,
            now: start)
    }

    static func member(_ name: String, token: String? = nil) -> RoomSubscriber.Member {
        .init(name: name, session: "session-\(name)", token: token ?? "token-\(name)")
    }

    /// The steps as text: `replace 1`, `publish 3 left`, `add 2`.
    static func describe(_ steps: [RoomLedger.Step]) -> [String] {
        steps.map { step in
            switch step {
            case .replace(let id): "replace \(id)"
            case .publish(let event): "publish \(event.seq) \(event.type)"
            case .add(let id): "add \(id)"
            }
        }
    }

    static func seq(_ decision: RoomLedger.SayDecision) -> (accepted: Bool, seq: Int) {
        switch decision {
        case .accepted(let event): (true, event.seq)
        case .duplicate(let seq): (false, seq)
        }
    }

    @Test("a member's join is added, then published as joined; the next say is numbered after it")
    func joinThenSay() throws {
        var ledger = Self.ledger()
        let alice = try ledger.join(Self.member("alice"), since: nil, now: Self.start + .seconds(1)).get()
        #expect(Self.describe(alice.steps) == ["add 1", "publish 1 joined"])
        #expect(alice.members == ["alice"] && alice.latestSeq == 0 && alice.recovered == nil)
        #expect(ledger.lastActive == Self.start + .seconds(1))
        let said = try ledger.say(ChatSay(clientMessageID: "m1", text: "hi"), from: "alice", token: "token-alice")
        #expect(Self.seq(said) == (true, 2))
        #expect(ledger.latestSeq == 2 && ledger.history.map(\.type) == ["joined", "message"])
    }

    @Test("a resend with the same token is a duplicate with the original seq; by name only when asked; never once trimmed out")
    func dedupe() throws {
        var ledger = Self.ledger(historyLimit: 2)
        let say = ChatSay(clientMessageID: "m1", text: "hi")
        let first = Self.seq(try ledger.say(say, from: "alice", token: "T"))
        let resent = Self.seq(try ledger.say(say, from: "alice", token: "T"))
        let otherToken = Self.seq(try ledger.say(say, from: "alice", token: "other"))
        let byName = Self.seq(try ledger.say(say, from: "alice", token: "third", matchByName: true))
        #expect(first == (true, 1) && resent == (false, 1))
        #expect(otherToken == (true, 2), "another token's ids are its own")
        #expect(byName == (false, 2), "matched by name")
        _ = try ledger.say(ChatSay(clientMessageID: "m2", text: "a"), from: "bob", token: "B")
        _ = try ledger.say(ChatSay(clientMessageID: "m3", text: "b"), from: "bob", token: "B")
        #expect(ledger.history.map(\.seq) == [3, 4])
        let afterTrim = Self.seq(try ledger.say(say, from: "alice", token: "T"))
        #expect(afterTrim == (true, 5), "trimmed out of history: no longer a duplicate")
    }

    @Test("history keeps within its count, its bytes and the server's budget, oldest dropped first, and releases the budget")
    func historyBounds() throws {
        let budget = HistoryBudget(limit: 1_000)
        var ledger = Self.ledger(historyLimit: 3, budget: budget)
        for id in 1...5 { _ = try ledger.say(ChatSay(clientMessageID: "m\(id)", text: "x"), from: "a", token: "T") }
        #expect(ledger.history.map(\.seq) == [3, 4, 5])
        #expect(budget.bytes == ledger.historyBytes)
        let one = ledger.history[0].bytes
        var bytes = Self.ledger(historyBytesLimit: one * 2, budget: HistoryBudget(limit: .max))
        for id in 1...4 { _ = try bytes.say(ChatSay(clientMessageID: "m\(id)", text: "x"), from: "a", token: "T") }
        #expect(bytes.history.count == 2 && bytes.historyBytes <= one * 2)
        let small = HistoryBudget(limit: one)
        var tight = Self.ledger(budget: small)
        for id in 1...3 { _ = try tight.say(ChatSay(clientMessageID: "m\(id)", text: "x"), from: "a", token: "T") }
        #expect(tight.history.map(\.seq) == [3] && small.bytes == one)
        let evicted = tight.evict(force: true)
        #expect(evicted && small.bytes == 0, "eviction releases the budget")
    }

    @Test("with no history kept, events are still numbered and nothing is deduplicated")
    func noHistory() throws {
        var ledger = Self.ledger(historyLimit: 0)
        let say = ChatSay(clientMessageID: "m1", text: "hi")
        let first = Self.seq(try ledger.say(say, from: "a", token: "T"))
        let again = Self.seq(try ledger.say(say, from: "a", token: "T"))
        #expect(first == (true, 1) && again == (true, 2))
        #expect(ledger.history.isEmpty && ledger.historyBytes == 0)
    }

    @Test("a present name with another token is refused; with the same token it replaces the older connection, which leaves first")
    func names() throws {
        var ledger = Self.ledger()
        _ = try ledger.join(Self.member("alice"), since: nil).get()
        let stolen = ledger.join(Self.member("alice", token: "stolen"), since: nil)
        #expect(throws: ChatRoom.Refusal.nameTaken) { try stolen.get() }
        let again = try ledger.join(Self.member("alice"), since: nil).get()
        #expect(Self.describe(again.steps) == ["replace 1", "publish 2 left", "add 2", "publish 3 joined"])
        #expect(ledger.roster.keys.elementsEqual([2]) && again.members == ["alice"])
    }

    @Test("a resume gets the events after since; in another epoch, every event kept, not recovered")
    func resume() throws {
        var ledger = Self.ledger()
        for id in 1...3 { _ = try ledger.say(ChatSay(clientMessageID: "m\(id)", text: "x"), from: "a", token: "T") }
        let resumed = try ledger.join(nil, since: 1, epoch: "E1").get()
        #expect(resumed.backlog.map(\.seq) == [2, 3] && resumed.recovered == true && resumed.oldestSeq == 1 && resumed.latestSeq == 3)
        let lost = try ledger.join(nil, since: 2, epoch: "E0").get()
        #expect(lost.backlog.map(\.seq) == [1, 2, 3] && lost.recovered == false)
        let fresh = try ledger.join(nil, since: nil).get()
        #expect(fresh.backlog.isEmpty && fresh.recovered == nil)
    }

    @Test("an observer is counted apart, publishes no presence, and is not a member")
    func observers() throws {
        var ledger = Self.ledger()
        let watcher = try ledger.join(nil, since: nil).get()
        #expect(Self.describe(watcher.steps) == ["add 1"] && ledger.observers == 1 && watcher.members.isEmpty)
        let left = ledger.leave(watcher.id)
        #expect(left.removed && left.left == nil && ledger.observers == 0 && ledger.latestSeq == 0)
        let twice = ledger.leave(watcher.id)
        #expect(!twice.removed, "gone already")
    }

    @Test("a member's leave publishes left in a room that numbers its events; a replica's store does that")
    func leave() throws {
        var local = Self.ledger()
        let bob = try local.join(Self.member("bob"), since: nil).get()
        let left = local.leave(bob.id, now: Self.start + .seconds(5))
        #expect(left.removed && left.left?.type == "left" && left.left?.seq == 2 && local.lastActive == Self.start + .seconds(5))
        var replica = Self.ledger(.external)
        let carol = try replica.join(Self.member("carol"), since: nil).get()
        #expect(Self.describe(carol.steps) == ["add 1"])
        let gone = replica.leave(carol.id)
        #expect(gone.removed && gone.left == nil && replica.latestSeq == 0)
    }

    @Test("a replica applies events in order: old ones skipped, a gap stops, a left for a connection here ends it")
    func replicaApply() throws {
        var replica = Self.ledger(.external)
        let dave = try replica.join(Self.member("dave"), since: nil).get()
        func event(_ seq: Int, departure: RoomEvent.Departure? = nil) -> RoomEvent {
            RoomEvent(seq: seq, type: departure == nil ? "message" : "left", json: "{}", epoch: "E1", departure: departure)
        }
        guard case .applied(nil) = replica.apply(event(1)) else { Issue.record("the next seq applies"); return }
        guard case .old = replica.apply(event(1)) else { Issue.record("an applied seq is skipped"); return }
        guard case .gap = replica.apply(event(3)) else { Issue.record("a seq past the next is a gap"); return }
        #expect(replica.latestSeq == 1)
        guard case .applied(let ending?) = replica.apply(event(2, departure: .init(session: "session-dave", replaced: true))) else {
            Issue.record("a left for dave's session ends his connection")
            return
        }
        #expect(ending.id == dave.id && ending.replaced && replica.roster.isEmpty)
    }

    @Test("a replica's restart ends every subscriber and keeps only what it is given")
    func replicaRestart() throws {
        var replica = Self.ledger(.external)
        _ = try replica.join(Self.member("erin"), since: nil).get()
        _ = try replica.join(nil, since: nil).get()
        let kept = [RoomEvent(seq: 41, type: "message", json: "{}", epoch: "E1"), RoomEvent(seq: 42, type: "message", json: "{}", epoch: "E1")]
        let ended = replica.restart(at: 42, with: kept)
        #expect(ended == [1, 2])
        #expect(replica.roster.isEmpty && replica.observers == 0 && replica.latestSeq == 42 && replica.history.map(\.seq) == [41, 42])
    }

    @Test("only an empty room is evicted (any room, forced); once evicted it takes no one and keeps nothing")
    func eviction() throws {
        var ledger = Self.ledger()
        let alice = try ledger.join(Self.member("alice"), since: nil).get()
        let whileBusy = ledger.evict()
        #expect(!whileBusy)
        _ = ledger.leave(alice.id)
        let once = ledger.evict()
        let twice = ledger.evict()
        #expect(once && !twice, "evicted once")
        #expect(ledger.history.isEmpty && ledger.historyBytes == 0)
        let late = ledger.join(Self.member("bob"), since: nil)
        #expect(throws: ChatRoom.Refusal.evicted) { try late.get() }
        var busy = Self.ledger()
        _ = try busy.join(Self.member("carol"), since: nil).get()
        let forced = busy.evict(force: true)
        #expect(forced)
    }
}
