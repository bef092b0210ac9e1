import DuplexSchema
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import DuplexChat

/// A room replica (the PostgreSQL store's local copy of a room): it applies events numbered
/// elsewhere strictly in seq order, without sockets or a database.
@Suite("ChatRoom replica")
struct ChatRoomReplicaTests {
    typealias Recorder = ChatRoomTests.Recorder

    static func event(_ seq: Int, _ type: String = "message", departure: RoomEvent.Departure? = nil) -> RoomEvent {
        RoomEvent(seq: seq, type: type, json: #"{"seq":\#(seq)}"#, epoch: "E", departure: departure)
    }

    @Test("starts from the store's epoch, latest seq and history; a resume replays from that history")
    func loads() throws {
        let room = ChatRoom(replicaOf: "r", epoch: "E", latestSeq: 7, history: [Self.event(6), Self.event(7)], historyLimit: 10)
        #expect(room.epoch == "E" && room.latestSeq == 7)
        let watcher = Recorder()
        let subscription = try room.subscribe(watcher.subscriber(member: nil), since: 5, epoch: "E").get()
        #expect(subscription.backlog.map(\.seq) == [6, 7] && subscription.recovered == true && subscription.oldestSeq == 6)
    }

    @Test("applies the next seq, skips ones applied before, and stops at a gap without applying past it")
    func order() throws {
        let room = ChatRoom(replicaOf: "r", epoch: "E", latestSeq: 0, history: [], historyLimit: 10)
        let watcher = Recorder()
        _ = try room.subscribe(watcher.subscriber(member: nil), since: nil).get()
        #expect(room.apply([Self.event(1), Self.event(2)]))
        #expect(room.apply([Self.event(2), Self.event(3)]), "2 again is skipped")
        #expect(!room.apply([Self.event(4), Self.event(6), Self.event(7)]), "6 is past a gap")
        #expect(watcher.seqs == [1, 2, 3, 4] && room.latestSeq == 4)
        #expect(room.apply([Self.event(5), Self.event(6), Self.event(7)]))
        #expect(watcher.seqs == [1, 2, 3, 4, 5, 6, 7])
    }

    @Test("a member joining a replica records no presence itself, and a name check is the store's")
    func noLocalPresence() throws {
        let room = ChatRoom(replicaOf: "r", epoch: "E", latestSeq: 3, history: [], historyLimit: 10)
        let first = Recorder()
        let second = Recorder()
        let a = try room.subscribe(first.subscriber(member: "alice", token: "one"), since: nil).get()
        _ = try room.subscribe(second.subscriber(member: "alice", token: "two"), since: nil).get()
        room.unsubscribe(a.id)
        #expect(room.latestSeq == 3 && first.seqs.isEmpty && second.seqs.isEmpty)
    }

    @Test("a left event for a connection still here closes it: 4001 when replaced, 1013 when its lease ran out")
    func departures() throws {
        let room = ChatRoom(replicaOf: "r", epoch: "E", latestSeq: 0, history: [], historyLimit: 10)
        let alice = Recorder()
        let bob = Recorder()
        _ = try room.subscribe(alice.subscriber(member: "alice"), since: nil).get()
        _ = try room.subscribe(bob.subscriber(member: "bob"), since: nil).get()
        room.apply([Self.event(1, "left", departure: .init(session: "session-alice", replaced: true))])
        room.apply([Self.event(2, "left", departure: .init(session: "session-bob", replaced: false))])
        #expect(alice.replacements.withLockedValue { $0 } == 1 && alice.overflows.withLockedValue { $0 } == 0)
        #expect(bob.overflows.withLockedValue { $0 } == 1 && bob.replacements.withLockedValue { $0 } == 0)
        #expect(alice.seqs.isEmpty, "a closed connection gets nothing more")
        #expect(room.subscriberCount == 0)
    }

    @Test("inside applyingTogether, events are numbered at once and reach each subscriber together afterwards, in order; outside, as each is applied")
    func applyingTogether() throws {
        let room = ChatRoom(replicaOf: "r", epoch: "E", latestSeq: 0, history: [], historyLimit: 10)
        let calls = NIOLockedValueBox([[Int]]())
        let member = RoomSubscriber(
            member: .init(name: "alice", session: "s-alice", token: "t-alice"),
            deliverAll: { events in
                calls.withLockedValue { $0.append(events.map(\.seq)) }
                return true
            },
            onOverflow: {}
        )
        _ = try room.subscribe(member, since: nil).get()
        ChatRoom.applyingTogether {
            room.apply([Self.event(1)])
            room.apply([Self.event(2)])
            #expect(room.latestSeq == 2, "numbered and kept at once")
            #expect(calls.withLockedValue { $0 }.isEmpty, "not delivered inside the scope")
            room.apply([Self.event(3)])
        }
        #expect(calls.withLockedValue { $0 } == [[1, 2, 3]], "one delivery of the three, in order")
        room.apply([Self.event(4)])
        room.apply([Self.event(5)])
        #expect(calls.withLockedValue { $0 } == [[1, 2, 3], [4], [5]])
    }

    @Test("a task started inside applyingTogether that applies after the scope ended delivers its events itself")
    func applyingAfterTheScope() async throws {
        let room = ChatRoom(replicaOf: "r", epoch: "E", latestSeq: 0, history: [], historyLimit: 10)
        let (delivered, deliveries) = AsyncStream.makeStream(of: [Int].self)
        let member = RoomSubscriber(
            member: .init(name: "alice", session: "s-alice", token: "t-alice"),
            deliverAll: { events in
                deliveries.yield(events.map(\.seq))
                return true
            },
            onOverflow: {}
        )
        _ = try room.subscribe(member, since: nil).get()
        let (go, start) = AsyncStream.makeStream(of: Void.self)
        // The task inherits the scope's task-local, as a catch-up or an answer's task does.
        let late = ChatRoom.applyingTogether {
            room.apply([Self.event(1)])
            return Task {
                for await _ in go { break }
                room.apply([Self.event(2)])
            }
        }
        start.yield()
        await late.value
        // Delivery is synchronous: whatever was delivered is in the stream by now.
        deliveries.finish()
        var seen: [[Int]] = []
        for await seqs in delivered { seen.append(seqs) }
        #expect(seen == [[1], [2]], "the event applied after the scope is delivered, not kept for a scope that ended")
        #expect(room.latestSeq == 2)
    }

    @Test("waitUntilApplied returns when the seq is applied, and false at its timeout")
    func waits() async throws {
        let room = ChatRoom(replicaOf: "r", epoch: "E", latestSeq: 0, history: [], historyLimit: 10)
        async let applied = room.waitUntilApplied(2, timeout: .seconds(30))
        room.apply([Self.event(1)])
        room.apply([Self.event(2)])
        #expect(await applied)
        #expect(await room.waitUntilApplied(2, timeout: .milliseconds(1)), "already applied")
        #expect(await !room.waitUntilApplied(3, timeout: .milliseconds(20)))
    }

    @Test("restart after lost events: every subscriber is closed (1013) and the history starts again")
    func restart() throws {
        let room = ChatRoom(replicaOf: "r", epoch: "E", latestSeq: 2, history: [Self.event(1), Self.event(2)], historyLimit: 10)
        let watcher = Recorder()
        _ = try room.subscribe(watcher.subscriber(member: nil), since: nil).get()
        room.restart(at: 900, with: [Self.event(899), Self.event(900)])
        #expect(watcher.overflows.withLockedValue { $0 } == 1 && room.subscriberCount == 0)
        #expect(room.latestSeq == 900 && room.historySize.events == 2)
    }
}
