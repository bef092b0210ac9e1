import DuplexHost
import DuplexSchema

/// Someone who receives a room's events: a WebSocket member, or an SSE observer.
package struct RoomSubscriber: Sendable {
    /// A member's identity: the name others see, the connection's session id, and the secret
    /// resume token that scopes its message ids.
    package struct Member: Sendable {
        package var name: String
        package var session: String
        package var token: String
    }

    /// The member, or nil for an observer, who is not present in the room.
    package var member: Member?
    /// Queues events for the subscriber, in order, all at once (a member writes them in one go);
    /// returns false when its queue is full (the events before the one that did not fit may have
    /// been queued).
    package var deliver: @Sendable ([RoomEvent]) -> Bool
    /// Called, outside the room's lock, when the subscriber was removed for falling behind.
    package var onOverflow: @Sendable () -> Void
    /// Called, outside the room's lock, when a newer connection of the same member (same name,
    /// same token) took this one's place.
    package var onReplaced: @Sendable () -> Void

    /// A subscriber that takes the events a room delivers together with `deliverAll`.
    package init(
        member: Member?,
        deliverAll: @escaping @Sendable ([RoomEvent]) -> Bool,
        onOverflow: @escaping @Sendable () -> Void,
        onReplaced: @escaping @Sendable () -> Void = {}
    ) {
        self.member = member
        self.deliver = deliverAll
        self.onOverflow = onOverflow
        self.onReplaced = onReplaced
    }

    /// A subscriber that takes events one at a time with `deliver`, until it returns false.
    package init(
        member: Member?,
        deliver: @escaping @Sendable (RoomEvent) -> Bool,
        onOverflow: @escaping @Sendable () -> Void,
        onReplaced: @escaping @Sendable () -> Void = {}
    ) {
        self.init(member: member, deliverAll: { $0.allSatisfy(deliver) }, onOverflow: onOverflow, onReplaced: onReplaced)
    }
}
