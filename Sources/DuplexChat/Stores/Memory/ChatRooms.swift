import DuplexHost
package import DuplexSchema
import Foundation
import NIOConcurrencyHelpers
package import NIOCore

/// The server's chat rooms, created on first use, at most `maxRooms` of them. When a new room
/// would exceed the limit, the empty room unused for longest is evicted (its history is gone);
/// only when every room has someone in it is a new room refused.
package final class ChatRooms: Sendable {
    private let historyLimit: Int
    private let historyBytesLimit: Int
    package let maxRooms: Int
    package let budget: HistoryBudget
    private let rooms = NIOLockedValueBox([String: ChatRoom]())

    package init(historyLimit: Int, maxRooms: Int, historyBytesLimit: Int = .max, totalHistoryBytesLimit: Int = .max) {
        self.historyLimit = historyLimit
        self.historyBytesLimit = historyBytesLimit
        self.maxRooms = max(maxRooms, 1)
        self.budget = HistoryBudget(limit: totalHistoryBytesLimit)
    }

    /// Subscribes to the room of that name, created (evicting an empty one if need be) when
    /// there is none. See ``ChatRoom/subscribe(_:since:epoch:deliverBacklog:)``.
    package func subscribe(
        room name: String,
        _ subscriber: RoomSubscriber,
        since: Int?,
        epoch: String? = nil,
        deliverBacklog: Bool = false,
        prelude: Prelude? = nil
    ) -> Result<(ChatRoom, ChatRoom.Subscription), ChatStoreRefusal> {
        // The room is found (or made) under this lock, and joined outside it: the join's
        // presence event is delivered to the room by the joining thread, which must not hold up
        // every other join meanwhile. A room evicted in between is replaced, and joined again
        // (a few times at most: each time, another join took its place).
        for _ in 0..<16 {
            let found = rooms.withLockedValue { rooms -> ChatRoom? in
                if let existing = rooms[name] { return existing }
                if rooms.count >= maxRooms {
                    let idle = rooms.compactMap { entry in entry.value.idleSince.map { (entry.key, $0) } }
                    guard let oldest = idle.min(by: { $0.1 < $1.1 }), rooms[oldest.0]?.evictIfEmpty() == true else {
                        return nil
                    }
                    rooms.removeValue(forKey: oldest.0)
                }
                let room = ChatRoom(name: name, historyLimit: historyLimit, historyBytesLimit: historyBytesLimit, budget: budget)
                rooms[name] = room
                return room
            }
            guard let room = found else { return .failure(.roomLimit) }
            switch room.subscribe(subscriber, since: since, epoch: epoch, deliverBacklog: deliverBacklog, prelude: prelude) {
            case .success(let subscription): return .success((room, subscription))
            case .failure(.nameTaken): return .failure(.nameTaken)
            case .failure(.evicted):
                rooms.withLockedValue { rooms in
                    if rooms[name] === room { rooms.removeValue(forKey: name) }
                }
            }
        }
        return .failure(.roomLimit)
    }

    /// Whether a subscriber could join the room of that name now: it exists, or there is room
    /// for it, or an empty room to evict.
    package func canHost(_ name: String) -> Bool {
        rooms.withLockedValue { rooms in
            rooms[name] != nil || rooms.count < maxRooms || rooms.values.contains { $0.idleSince != nil }
        }
    }

    /// The number of rooms held.
    package var count: Int { rooms.withLockedValue { $0.count } }

    /// The room of that name, if it exists.
    package func existing(_ name: String) -> ChatRoom? {
        rooms.withLockedValue { $0[name] }
    }

    /// Forgets every room, as a process that restarts with no memory would: each room's history
    /// is gone, and the next room of the same name has a new epoch.
    package func forgetAll() {
        rooms.withLockedValue { rooms in
            for room in rooms.values { _ = room.evictIfEmpty(force: true) }
            rooms.removeAll()
        }
    }
}

extension ChatRooms: ChatStore {
    package func join(
        room name: String,
        _ subscriber: RoomSubscriber,
        since: Int?,
        epoch: String?,
        deliverBacklog: Bool,
        prelude: Prelude?,
        on loop: any EventLoop
    ) -> StoreAnswer<Result<(ChatRoom, ChatRoom.Subscription), ChatStoreRefusal>> {
        .now(subscribe(room: name, subscriber, since: since, epoch: epoch, deliverBacklog: deliverBacklog, prelude: prelude))
    }

    package func record(
        _ say: ChatSay,
        in room: ChatRoom,
        from name: String,
        token: String,
        matchByName: Bool,
        on loop: any EventLoop
    ) -> StoreAnswer<Result<ChatRoom.SayResult, any Error>> {
        .now(Result { try room.say(say, from: name, token: token, matchByName: matchByName) })
    }

    package func leave(_ subscription: ChatRoom.Subscription, member: RoomSubscriber.Member?, from room: ChatRoom) {
        room.unsubscribe(subscription.id)
    }

    package func prepare() async throws {}

    package func run() async {}

    package var healthJSON: String { #"{"kind":"memory","rooms":\#(count)}"# }
    package var roomCount: Int { count }
    package var historyBytes: Int { budget.bytes }
}
