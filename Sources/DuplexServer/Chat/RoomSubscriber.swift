import DuplexSchema

/// Someone who receives a room's events: a WebSocket member, or an SSE observer.
struct RoomSubscriber: Sendable {
    /// A member's identity: the name others see, the connection's session id, and the secret
    /// resume token that scopes its message ids.
    struct Member: Sendable {
        var name: String
        var session: String
        var token: String
    }

    /// The member, or nil for an observer, who is not present in the room.
    var member: Member?
    /// Queues an event for the subscriber; returns false when its queue is full.
    var deliver: @Sendable (RoomEvent) -> Bool
    /// Called, outside the room's lock, when the subscriber was removed for falling behind.
    var onOverflow: @Sendable () -> Void
    /// Called, outside the room's lock, when a newer connection of the same member (same name,
    /// same token) took this one's place.
    var onReplaced: @Sendable () -> Void = {}
}
