/// How a consumer stream (``WebSocket/messages``, ``WebSocket/events``,
/// ``ServerSentEventManager/events``, ``ChatClient/events``) holds the elements its reader has
/// not read yet.
///
/// ```swift
/// // Every message, in order; a slow reader holds the sender back through TCP.
/// for await message in socket.messages { ... }
/// // A UI that shows the latest values only: never holds the socket back.
/// for await event in socket.events(buffering: .newest(100)) { ... }
/// ```
public struct StreamBuffering: Sendable, Hashable, CustomStringConvertible {
    enum Kind: Sendable, Hashable {
        case lossless
        case newest(Int)
        case oldest(Int)
    }

    let kind: Kind

    /// Nothing is dropped (the default). When a reader falls behind by the configured limit
    /// (``WebSocketConfiguration/streamBufferLimit`` elements or
    /// ``WebSocketConfiguration/streamBufferBytes`` bytes), the producer is held back: a socket
    /// stops reading from the network, so TCP holds back the sender; an SSE connection stops
    /// reading its body. Reading resumes once every lossless reader is back under half the limit.
    /// Memory stays bounded, and every element arrives in order.
    ///
    /// A lossless stream that is kept but never read holds the connection back once it is full:
    /// read it, or let go of it.
    public static let lossless = StreamBuffering(kind: .lossless)

    /// Keeps at most `limit` unread elements, dropping the oldest to make room: for a reader that
    /// only wants the latest values, such as a UI. Never holds the producer back; drops are
    /// counted and logged.
    public static func newest(_ limit: Int) -> StreamBuffering { StreamBuffering(kind: .newest(max(limit, 1))) }

    /// Keeps the first `limit` unread elements and drops new ones while full. Never holds the
    /// producer back; drops are counted and logged.
    public static func oldest(_ limit: Int) -> StreamBuffering { StreamBuffering(kind: .oldest(max(limit, 1))) }

    public var description: String {
        switch kind {
        case .lossless: "lossless"
        case .newest(let limit): "newest(\(limit))"
        case .oldest(let limit): "oldest(\(limit))"
        }
    }
}
