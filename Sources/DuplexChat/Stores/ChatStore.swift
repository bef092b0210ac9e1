import DuplexHost
package import DuplexSchema
import Foundation
package import NIOCore

/// Where a server's chat rooms live: ``ChatRooms`` in the process's memory (the default), or
/// `PostgresChatStore` (the `DuplexPostgres` library), which numbers events in PostgreSQL so that several `duplex-server`
/// processes serve the same rooms and history survives restarts.
///
/// Either way, a subscriber is served by a local ``ChatRoom`` (for the PostgreSQL store, a
/// replica) that queues events to it in seq order.
package protocol ChatStore: Sendable {
    /// What a subscriber is told before the backlog, when it resumes: whether its position was
    /// recovered (nil: it gave none), the room's epoch and its latest seq. Called under the
    /// room's lock.
    typealias Prelude = @Sendable (_ recovered: Bool?, _ epoch: String, _ latestSeq: Int) -> Void

    /// Adds a member or an observer to a room, creating the room if need be, for the
    /// subscriber's event loop: the answer at once (the memory store), or later on `loop` (a
    /// store that waits on a database). See ``ChatRoom/subscribe(_:since:epoch:deliverBacklog:prelude:)``
    /// for `since`, `epoch`, `deliverBacklog` and `prelude`. Refused when the room cannot be
    /// hosted, the name is taken by another token, or the store is unavailable.
    func join(
        room name: String,
        _ subscriber: RoomSubscriber,
        since: Int?,
        epoch: String?,
        deliverBacklog: Bool,
        prelude: Prelude?,
        on loop: any EventLoop
    ) -> StoreAnswer<Result<(ChatRoom, ChatRoom.Subscription), ChatStoreRefusal>>

    /// A member's message, posted idempotently (see ``ChatRoom/say(_:from:token:matchByName:at:)``),
    /// for its connection's event loop: the result at once, or later on `loop`, once the message
    /// has been queued to the room's local subscribers.
    func record(
        _ say: ChatSay,
        in room: ChatRoom,
        from name: String,
        token: String,
        matchByName: Bool,
        on loop: any EventLoop
    ) -> StoreAnswer<Result<ChatRoom.SayResult, any Error>>

    /// A member's connection leaves its room: no event reaches it after this returns. A store
    /// that records departures does so in the background.
    func leave(_ subscription: ChatRoom.Subscription, member: RoomSubscriber.Member?, from room: ChatRoom)

    /// Whether a subscriber could join the room of that name now.
    func canHost(_ name: String) -> Bool

    /// Forgets what this process holds of every room, as a restart would. For the memory store
    /// that is all of it; a shared store keeps the rooms.
    func forgetAll()

    /// Connects and prepares the store; throws when it cannot (the server does not start).
    func prepare() async throws

    /// Runs the store's background work (connections, notifications, leases) until cancelled.
    func run() async

    /// What the store reports in `GET /health`: a JSON object.
    var healthJSON: String { get }
    /// The rooms this server holds now, and the bytes of history they keep (`GET /metrics`).
    var roomCount: Int { get }
    var historyBytes: Int { get }
}

extension ChatStore {
    /// A member's join: the backlog comes in its welcome, not through its subscriber.
    package func join(
        room name: String,
        _ subscriber: RoomSubscriber,
        since: Int?,
        epoch: String?,
        on loop: any EventLoop
    ) -> StoreAnswer<Result<(ChatRoom, ChatRoom.Subscription), ChatStoreRefusal>> {
        join(room: name, subscriber, since: since, epoch: epoch, deliverBacklog: false, prelude: nil, on: loop)
    }
}

/// Why a subscriber could not join a room, on any store.
package enum ChatStoreRefusal: Error, Equatable {
    /// Every room has someone in it, and there are `maxRooms` of them.
    case roomLimit
    /// A member of that name is present, with another token.
    case nameTaken
    /// The room store cannot be reached (why).
    case unavailable(String)
}

/// The store is unavailable: the database cannot be reached, or did not answer in time.
package struct ChatStoreUnavailable: Error, CustomStringConvertible {
    package var description: String

    package init(description: String) {
        self.description = description
    }
}
