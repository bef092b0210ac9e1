import DuplexSchema
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import DuplexHost
@testable import DuplexChat

/// The room's sequencing, history, dedupe, identity and slow-subscriber rules, without sockets.
@Suite("ChatRoom")
struct ChatRoomTests {
    /// A subscriber that records what it gets, and accepts at most `capacity` events.
    final class Recorder: Sendable {
        let events = NIOLockedValueBox([RoomEvent]())
        let overflows = NIOLockedValueBox(0)
        let replacements = NIOLockedValueBox(0)
        let capacity: Int

        init(capacity: Int = .max) { self.capacity = capacity }

        func subscriber(member: String?, token: String? = nil) -> RoomSubscriber {
            RoomSubscriber(
                member: member.map { .init(name: $0, session: "session-\($0)", token: token ?? "token-\($0)") },
                deliver: { event in
                    self.events.withLockedValue { events in
                        guard events.count < self.capacity else { return false }
                        events.append(event)
                        return true
                    }
                },
                onOverflow: { self.overflows.withLockedValue { $0 += 1 } },
                onReplaced: { self.replacements.withLockedValue { $0 += 1 } }
            )
        }

        var seqs: [Int] { events.withLockedValue { $0.map(\.seq) } }
        var types: [String] { events.withLockedValue { $0.map(\.type) } }
    }

    static func say(_ room: ChatRoom, _ id: String, _ text: String = "t", from name: String, token: String? = nil, matchByName: Bool = false) throws
        -> ChatRoom.SayResult
    {
        try room.say(ChatSay(clientMessageID: id, text: text), from: name, token: token ?? "token-\(name)", matchByName: matchByName)
    }

    @Test("messages and presence share one sequence, starting at 1")
    func sequence() throws {
        let room = ChatRoom(name: "r", historyLimit: 10)
        let alice = Recorder()
        let subscription = try room.subscribe(alice.subscriber(member: "alice"), since: nil).get()
        #expect(subscription.latestSeq == 0 && subscription.members == ["alice"])
        #expect(try Self.say(room, "1", from: "alice") == .accepted(seq: 2))
        let bob = Recorder()
        let bobSubscription = try room.subscribe(bob.subscriber(member: "bob"), since: nil).get()
        room.unsubscribe(bobSubscription.id)
        #expect(alice.seqs == [1, 2, 3, 4])
        #expect(alice.types == ["joined", "message", "joined", "left"])
    }

    @Test("an event reaches the subscribers in the order they joined, also after some left")
    func fanOutInJoinOrder() throws {
        let room = ChatRoom(name: "r", historyLimit: 10)
        let order = NIOLockedValueBox([String]())
        var subscriptions: [String: ChatRoom.Subscription] = [:]
        for index in 0..<200 {
            let name = "m\(index)"
            let subscriber = RoomSubscriber(
                member: .init(name: name, session: name, token: name),
                deliver: { event in
                    if event.type == "message" { order.withLockedValue { $0.append(name) } }
                    return true
                },
                onOverflow: {}
            )
            subscriptions[name] = try room.subscribe(subscriber, since: nil).get()
        }
        for index in stride(from: 0, to: 200, by: 3) { room.unsubscribe(subscriptions["m\(index)"]!.id) }
        _ = try Self.say(room, "1", from: "m1", token: "m1")
        let expected = (0..<200).filter { $0 % 3 != 0 }.map { "m\($0)" }
        #expect(order.withLockedValue { $0 } == expected)
    }

    @Test("a repeated id is a duplicate only while the original is in history, and only from the same token")
    func dedupeFollowsHistory() throws {
        let room = ChatRoom(name: "r", historyLimit: 2)
        #expect(try Self.say(room, "x", from: "a") == .accepted(seq: 1))
        #expect(try Self.say(room, "x", from: "a") == .duplicate(seq: 1))
        #expect(try Self.say(room, "x", from: "b") == .accepted(seq: 2), "ids are per member")
        #expect(try Self.say(room, "y", from: "a") == .accepted(seq: 3))
        // seq 1 has left the history of 2: the id is free again
        #expect(try Self.say(room, "x", from: "a") == .accepted(seq: 4))
        // The same name with another token is another member: it cannot claim a's ids.
        #expect(try Self.say(room, "x", from: "a", token: "impostor-token") == .accepted(seq: 5))
        // A connection that presented no token (a fresh token each time) is matched by name too.
        #expect(try Self.say(room, "z", from: "c", token: "c-first") == .accepted(seq: 6))
        #expect(try Self.say(room, "z", from: "c", token: "c-second", matchByName: true) == .duplicate(seq: 6))
    }

    @Test("a name present in the room is refused without its token; with it, the newer connection replaces the older")
    func namesAreUnique() throws {
        let room = ChatRoom(name: "r", historyLimit: 10)
        let alice = Recorder()
        let watcher = Recorder()
        _ = try room.subscribe(watcher.subscriber(member: nil), since: nil).get()
        _ = try room.subscribe(alice.subscriber(member: "alice", token: "alice-secret"), since: nil).get()
        let impostor = Recorder()
        #expect(room.subscribe(impostor.subscriber(member: "alice", token: "guessed"), since: nil).failure == .nameTaken)
        let again = Recorder()
        let second = try room.subscribe(again.subscriber(member: "alice", token: "alice-secret"), since: nil).get()
        #expect(second.members == ["alice"], "one alice, not two")
        #expect(alice.replacements.withLockedValue { $0 } == 1)
        #expect(watcher.types == ["joined", "left", "joined"], "the older connection leaves, the newer joins")
    }

    @Test("history is bounded by bytes per room and by the server's budget")
    func historyBytes() throws {
        let room = ChatRoom(name: "r", historyLimit: 1000, historyBytesLimit: 20_000)
        let text = String(repeating: "\u{1}", count: 1000)  // escapes to 6,000 bytes of JSON
        for i in 1...50 { _ = try Self.say(room, "\(i)", text, from: "a") }
        #expect(room.historySize.bytes <= 20_000)
        #expect(room.historySize.events >= 1)
        let budget = HistoryBudget(limit: 30_000)
        let first = ChatRoom(name: "one", historyLimit: 1000, budget: budget)
        let second = ChatRoom(name: "two", historyLimit: 1000, budget: budget)
        for i in 1...50 {
            _ = try Self.say(first, "\(i)", text, from: "a")
            _ = try Self.say(second, "\(i)", text, from: "a")
        }
        #expect(budget.bytes <= 30_000)
        #expect(budget.bytes == first.historySize.bytes + second.historySize.bytes)
    }

    @Test("deliverBacklog sends the backlog through deliver before any live event")
    func backlogThroughDeliver() throws {
        let room = ChatRoom(name: "r", historyLimit: 10)
        for i in 1...3 { _ = try Self.say(room, "\(i)", from: "a") }
        let watcher = Recorder()
        let subscription = try room.subscribe(watcher.subscriber(member: nil), since: 1, deliverBacklog: true).get()
        #expect(subscription.backlog.isEmpty)
        _ = try Self.say(room, "4", from: "a")
        #expect(watcher.seqs == [2, 3, 4])
    }

    @Test("a subscriber that cannot keep up is told once, gets nothing more, and still leaves")
    func slowSubscriber() throws {
        let room = ChatRoom(name: "r", historyLimit: 10)
        let slow = Recorder(capacity: 2)
        let fast = Recorder()
        let slowSubscription = try room.subscribe(slow.subscriber(member: "slow"), since: nil).get()  // seq 1
        _ = try room.subscribe(fast.subscriber(member: "fast"), since: nil).get()  // seq 2
        for i in 1...3 { _ = try Self.say(room, "\(i)", from: "fast") }
        #expect(slow.seqs == [1, 2])
        #expect(slow.overflows.withLockedValue { $0 } == 1)
        room.unsubscribe(slowSubscription.id)
        #expect(fast.types.last == "left", "the stalled member's departure is still announced")
        #expect(fast.seqs == [2, 3, 4, 5, 6])
    }

    @Test("at the room limit, the empty room unused for longest is evicted; only when none is empty is a room refused")
    func roomLimit() throws {
        let rooms = ChatRooms(historyLimit: 10, maxRooms: 2)
        let holder = Recorder()
        let (a, held) = try rooms.subscribe(room: "a", holder.subscriber(member: "x"), since: nil).get()
        let (b, visit) = try rooms.subscribe(room: "b", Recorder().subscriber(member: "y"), since: nil).get()
        b.unsubscribe(visit.id)
        // "b" is empty: "c" takes its place.
        let (c, cVisit) = try rooms.subscribe(room: "c", Recorder().subscriber(member: "z"), since: nil).get()
        #expect(rooms.count == 2 && c !== b)
        // Both rooms have someone in them: "d" is refused.
        #expect(rooms.subscribe(room: "d", Recorder().subscriber(member: "w"), since: nil).failure == .roomLimit)
        #expect(!rooms.canHost("d") && rooms.canHost("a"))
        a.unsubscribe(held.id)
        c.unsubscribe(cVisit.id)
        // 10,000 rooms created and left one after another: creation keeps working.
        for i in 0..<10_000 {
            let (room, visit) = try rooms.subscribe(room: "flood-\(i)", Recorder().subscriber(member: nil), since: nil).get()
            room.unsubscribe(visit.id)
        }
        #expect(rooms.count == 2)
        #expect(try rooms.subscribe(room: "mine", Recorder().subscriber(member: "me"), since: nil).get().1.members == ["me"])
    }
}

extension Result {
    var failure: Failure? {
        if case .failure(let failure) = self { return failure }
        return nil
    }
}

@Suite("TickClock")
struct TickClockTests {
    @Test("resume points: live without an id, next after a recent id, oldest kept after an old one")
    func firstTick() {
        let clock = TickClock()
        let current = clock.currentTick(intervalMilliseconds: 1000)
        let first = { (id: String?) in clock.firstTick(after: id, intervalMilliseconds: 1000, window: 100) }
        #expect([current + 1, current + 2].contains(first(nil)))
        #expect([current + 1, current + 2].contains(first("garbage")))
        #expect(first(String(current - 5)) == current - 4)
        #expect(first(String(current - 1000)) >= current - 100 + 1)
        #expect(first(String(current - 1000)) <= current - 100 + 2)
        #expect([current + 1, current + 2].contains(first(String(current + 50))), "an id from the future gets the live stream")
    }

    @Test("tick events carry the id, the number and the scheduled time")
    func tickEvent() {
        let event = TickClock.event(tick: 1_795_339_800, intervalMilliseconds: 1000)
        #expect(event.id == "1795339800" && event.event == "tick")
        #expect(event.data == #"{"n":1795339800,"at":"2026-11-22T09:30:00.000Z"}"#)
    }
}
