import DuplexSchema
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import DuplexServer

/// The room's sequencing, history, dedupe and slow-subscriber rules, without sockets.
@Suite("ChatRoom")
struct ChatRoomTests {
    /// A subscriber that records what it gets, and accepts at most `capacity` events.
    final class Recorder: Sendable {
        let events = NIOLockedValueBox([RoomEvent]())
        let overflows = NIOLockedValueBox(0)
        let capacity: Int

        init(capacity: Int = .max) { self.capacity = capacity }

        func subscriber(member: String?) -> RoomSubscriber {
            RoomSubscriber(
                member: member.map { ($0, "session-\($0)") },
                deliver: { event in
                    self.events.withLockedValue { events in
                        guard events.count < self.capacity else { return false }
                        events.append(event)
                        return true
                    }
                },
                onOverflow: { self.overflows.withLockedValue { $0 += 1 } }
            )
        }

        var seqs: [Int] { events.withLockedValue { $0.map(\.seq) } }
        var types: [String] { events.withLockedValue { $0.map(\.type) } }
    }

    @Test("messages and presence share one sequence, starting at 1")
    func sequence() throws {
        let room = ChatRoom(name: "r", historyLimit: 10)
        let alice = Recorder()
        let subscription = room.subscribe(alice.subscriber(member: "alice"), since: nil)
        #expect(subscription.latestSeq == 0 && subscription.members == ["alice"])
        #expect(try room.say(ChatSay(clientMessageID: "1", text: "a"), from: "alice") == .accepted(seq: 2))
        let bob = Recorder()
        let bobSubscription = room.subscribe(bob.subscriber(member: "bob"), since: nil)
        room.unsubscribe(bobSubscription.id)
        #expect(alice.seqs == [1, 2, 3, 4])
        #expect(alice.types == ["joined", "message", "joined", "left"])
    }

    @Test("a repeated id is a duplicate only while the original is in history")
    func dedupeFollowsHistory() throws {
        let room = ChatRoom(name: "r", historyLimit: 2)
        #expect(try room.say(ChatSay(clientMessageID: "x", text: "1"), from: "a") == .accepted(seq: 1))
        #expect(try room.say(ChatSay(clientMessageID: "x", text: "1"), from: "a") == .duplicate(seq: 1))
        #expect(try room.say(ChatSay(clientMessageID: "x", text: "1"), from: "b") == .accepted(seq: 2), "ids are per sender")
        #expect(try room.say(ChatSay(clientMessageID: "y", text: "2"), from: "a") == .accepted(seq: 3))
        // seq 1 has left the history of 2: the id is free again
        #expect(try room.say(ChatSay(clientMessageID: "x", text: "1"), from: "a") == .accepted(seq: 4))
    }

    @Test("deliverBacklog sends the backlog through deliver before any live event")
    func backlogThroughDeliver() throws {
        let room = ChatRoom(name: "r", historyLimit: 10)
        for i in 1...3 { _ = try room.say(ChatSay(clientMessageID: "\(i)", text: "\(i)"), from: "a") }
        let watcher = Recorder()
        let subscription = room.subscribe(watcher.subscriber(member: nil), since: 1, deliverBacklog: true)
        #expect(subscription.backlog.isEmpty)
        _ = try room.say(ChatSay(clientMessageID: "4", text: "4"), from: "a")
        #expect(watcher.seqs == [2, 3, 4])
    }

    @Test("a subscriber that cannot keep up is told once, gets nothing more, and still leaves")
    func slowSubscriber() throws {
        let room = ChatRoom(name: "r", historyLimit: 10)
        let slow = Recorder(capacity: 2)
        let fast = Recorder()
        let slowSubscription = room.subscribe(slow.subscriber(member: "slow"), since: nil)  // seq 1
        _ = room.subscribe(fast.subscriber(member: "fast"), since: nil)  // seq 2
        for i in 1...3 { _ = try room.say(ChatSay(clientMessageID: "\(i)", text: "\(i)"), from: "fast") }
        #expect(slow.seqs == [1, 2])
        #expect(slow.overflows.withLockedValue { $0 } == 1)
        room.unsubscribe(slowSubscription.id)
        #expect(fast.types.last == "left", "the stalled member's departure is still announced")
        #expect(fast.seqs == [2, 3, 4, 5, 6])
    }

    @Test("rooms are created on demand up to the limit")
    func roomLimit() {
        let rooms = ChatRooms(historyLimit: 1, maxRooms: 2)
        let a = rooms.room(named: "a")
        #expect(a != nil && rooms.room(named: "a") === a)
        #expect(rooms.room(named: "b") != nil)
        #expect(rooms.room(named: "c") == nil)
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
