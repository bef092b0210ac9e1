public import Duplex
public import DuplexSchema
import Logging
import NIOConcurrencyHelpers

/// An in-memory WebSocket for testing code written against `WebSocketProtocol`, with no sockets.
///
/// `pair()` makes two connected ends, a client and a server: what one sends, the other
/// receives, in order; closing one disconnects both, and `connect()` on either joins them again.
/// The client end behaves as `WebSocket` does: its streams stay open across a close,
/// for the next connection. The server end behaves as a connection a server serves: when the
/// connection closes (or drops, ``drop()``), its `messages` and `events` streams end, so that a
/// server loop over them ends too; after a `connect()` its new streams get the new connection's.
///
/// ```swift
/// let (client, server) = MockWebSocket.pair()
/// let received = server.messages
/// try await client.send("hello")
/// for await message in received { #expect(message.text == "hello"); break }
/// await client.disconnect(code: .normalClosure, reason: "done")
/// #expect(server.state == .disconnected(.closed(code: .normalClosure, reason: "done")))
/// ```
public final class MockWebSocket: WebSocketProtocol {
    private struct Link {
        var connected = true
        var terminated = false
    }

    private struct Streams {
        var events: Broadcaster<WebSocketEvent>
        var messages: Broadcaster<WebSocketMessage>
    }

    /// The streams of the current connection (for the server end, they end with it).
    private let streams: NIOLockedValueBox<Streams>
    private var events_: Broadcaster<WebSocketEvent> { streams.withLockedValue { $0.events } }
    private var messages_: Broadcaster<WebSocketMessage> { streams.withLockedValue { $0.messages } }
    /// Whether this is the server end, whose streams end with each connection.
    private let isServerEnd: Bool
    private let states: Broadcaster<WebSocketState>
    private let current: NIOLockedValueBox<WebSocketState>
    private let link: NIOLockedValueBox<Link>
    private let sent = NIOLockedValueBox<[WebSocketMessage]>([])
    private let pingState = NIOLockedValueBox<(roundTrip: Duration, onPingFailed: (@Sendable (WebSocketError) -> Void)?)>((.zero, nil))
    private struct WeakPeer {
        weak var value: MockWebSocket?
    }

    private let peerBox = NIOLockedValueBox(WeakPeer())
    private var peer: MockWebSocket? { peerBox.withLockedValue { $0.value } }

    private init(link: NIOLockedValueBox<Link>, isServerEnd: Bool) {
        let logger = Logger(label: "duplex.mock")
        self.isServerEnd = isServerEnd
        self.streams = NIOLockedValueBox(Self.makeStreams())
        self.states = Broadcaster(limit: 65_536, buffering: .newest(65_536), label: "stateEvents", logger: logger)
        self.current = NIOLockedValueBox(.connected(protocol: nil))
        self.link = link
    }

    /// What arrives before anyone listens is kept for the first listener, as a socket's receive
    /// buffer would: seed code sends, then reads `events`.
    private static func makeStreams() -> Streams {
        let logger = Logger(label: "duplex.mock")
        return Streams(
            events: Broadcaster(limit: 65_536, label: "events", logger: logger, keepsForFirstConsumer: 1_024),
            messages: Broadcaster(limit: 65_536, label: "messages", logger: logger, keepsForFirstConsumer: 1_024)
        )
    }

    /// Two connected ends of one in-memory connection: the client end, then the server end.
    public static func pair() -> (client: MockWebSocket, server: MockWebSocket) {
        let link = NIOLockedValueBox(Link())
        let first = MockWebSocket(link: link, isServerEnd: false)
        let second = MockWebSocket(link: link, isServerEnd: true)
        first.peerBox.withLockedValue { $0.value = second }
        second.peerBox.withLockedValue { $0.value = first }
        return (first, second)
    }

    public var state: WebSocketState { current.withLockedValue { $0 } }
    public var events: AsyncStream<WebSocketEvent> { events_.makeStream() }
    public var messages: AsyncStream<WebSocketMessage> { messages_.makeStream() }
    public var stateEvents: AsyncStream<WebSocketState> {
        current.withLockedValue { states.makeStream(startingWith: $0) }
    }

    /// Every message this end has sent, in order.
    public var sentMessages: [WebSocketMessage] { sent.withLockedValue { $0 } }

    /// Joins both ends again after a disconnect; does nothing when connected.
    /// - Throws: `WebSocketError` with code `terminated` after `terminate()`.
    public func connect() async throws {
        let rejoined = try link.withLockedValue { link -> Bool in
            guard !link.terminated else { throw WebSocketError(.terminated, "the mock was terminated") }
            guard !link.connected else { return false }
            link.connected = true
            return true
        }
        guard rejoined else { return }
        for end in [self, peer].compactMap({ $0 }) {
            end.set(.connecting)
            end.set(.connected(protocol: nil))
            end.events_.yield(.connected(protocol: nil))
        }
    }

    /// Disconnects both ends: this one as manually disconnected, the other as closed by its peer
    /// with `code` and `reason`. Does nothing when already disconnected.
    public func disconnect(code: WebSocketCloseCode, reason: String) async {
        close(code: code, reason: reason)
    }

    /// The same as ``disconnect(code:reason:)``, without waiting.
    public func close(code: WebSocketCloseCode = .normalClosure, reason: String = "") {
        let wasConnected = link.withLockedValue { link in
            defer { link.connected = false }
            return link.connected
        }
        guard wasConnected else { return }
        events_.yield(.disconnected(code: code, reason: reason))
        set(.disconnected(.manuallyDisconnected))
        if let peer {
            peer.events_.yield(.disconnected(code: code, reason: reason))
            peer.set(.disconnected(.closed(code: code, reason: reason)))
        }
        for end in [self, peer].compactMap({ $0 }) { end.connectionEnded() }
    }

    /// Loses the connection with no close frame, as a network does: both ends see it closed
    /// abnormally (no close code; their state says 1006). Does nothing when disconnected.
    public func drop() {
        let wasConnected = link.withLockedValue { link in
            defer { link.connected = false }
            return link.connected
        }
        guard wasConnected else { return }
        for end in [self, peer].compactMap({ $0 }) {
            end.events_.yield(.disconnected(code: nil, reason: nil))
            end.set(.disconnected(.closed(code: .abnormalClosure, reason: "")))
            end.connectionEnded()
        }
    }

    /// The server end's streams end with the connection; the next connection gets new ones.
    private func connectionEnded() {
        guard isServerEnd else { return }
        let ended = streams.withLockedValue { streams in
            defer { streams = Self.makeStreams() }
            return streams
        }
        ended.events.finish()
        ended.messages.finish()
    }

    /// Disconnects both ends and finishes this end's streams.
    public func terminate() async {
        close(code: .normalClosure, reason: "terminated")
        link.withLockedValue { $0.terminated = true }
        set(.disconnected(.terminated))
        events_.finish()
        messages_.finish()
        states.finish()
    }

    /// The round trip ``ping(timeout:)`` reports; `.zero` by default.
    public var pingRoundTrip: Duration {
        get { pingState.withLockedValue { $0.roundTrip } }
        set { pingState.withLockedValue { $0.roundTrip = newValue } }
    }

    public var onPingFailed: (@Sendable (WebSocketError) -> Void)? {
        get { pingState.withLockedValue { $0.onPingFailed } }
        set { pingState.withLockedValue { $0.onPingFailed = newValue } }
    }

    /// Answers at once with ``pingRoundTrip`` while connected.
    /// - Throws: `WebSocketError` with code `notConnected` when disconnected.
    public func ping(timeout: Duration = .seconds(10)) async throws -> Duration {
        guard link.withLockedValue({ $0.connected }) else { throw WebSocketError(.notConnected, "the mock is disconnected") }
        return pingRoundTrip
    }

    /// Nothing is buffered: returns at once while connected.
    /// - Throws: `WebSocketError` with code `notConnected` when disconnected.
    public func flush() async throws {
        guard link.withLockedValue({ $0.connected }) else { throw WebSocketError(.notConnected, "the mock is disconnected") }
    }

    /// Acts as if `missedPings` keep-alive pings in a row went unanswered: ``onPingFailed`` is
    /// called, and the connection is dropped, this end's state saying
    /// `.disconnected(.pingFailed(missedPings:))`, as `WebSocket`'s does.
    public func failPings(missedPings: Int = 2) {
        let wasConnected = link.withLockedValue { link in
            defer { link.connected = false }
            return link.connected
        }
        guard wasConnected else { return }
        onPingFailed?(WebSocketError(.pingFailed, "\(missedPings) pings in a row went unanswered"))
        events_.yield(.disconnected(code: nil, reason: nil))
        set(.disconnected(.pingFailed(missedPings: missedPings)))
        if let peer {
            peer.events_.yield(.disconnected(code: nil, reason: nil))
            peer.set(.disconnected(.closed(code: .abnormalClosure, reason: "")))
        }
        for end in [self, peer].compactMap({ $0 }) { end.connectionEnded() }
    }

    /// Delivers `message` to the other end.
    /// - Throws: `WebSocketError` with code `notConnected` when disconnected.
    public func send(_ message: WebSocketMessage) async throws {
        let connected = link.withLockedValue { $0.connected }
        guard connected, let peer else {
            throw WebSocketError(.notConnected, "the mock is disconnected")
        }
        sent.withLockedValue { $0.append(message) }
        peer.messages_.yield(message)
        peer.events_.yield(.message(message))
    }

    private func set(_ state: WebSocketState) {
        current.withLockedValue { current in
            current = state
            states.yield(state)
        }
    }
}
