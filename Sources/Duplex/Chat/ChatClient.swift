public import DuplexSchema
import DuplexWire
public import Foundation
import Logging
import NIOConcurrencyHelpers

/// What happens in a ``ChatClient``'s room, in order: its `events` stream.
public enum ChatEvent: Sendable, Equatable {
    /// Joined the room: the first time, or again after a reconnection (`resumed`), in which case
    /// the events missed meanwhile follow.
    case welcome(ChatWelcome, resumed: Bool)
    /// A message posted to the room, the client's own included. Each seq is reported once, and
    /// a message the server broadcasts again in a new epoch (its sender resent it because a
    /// server that lost its history never acknowledged it) is not reported again if it was among
    /// the last 32,768 messages reported.
    case message(ChatMessage)
    /// Someone joined the room.
    case joined(ChatPresence)
    /// Someone left the room.
    case left(ChatPresence)
    /// The server accepted a message this client said.
    case delivered(ChatAck)
    /// The server rejected a frame (a message too long, say). The connection stays open.
    case rejected(ChatErrorFrame)
    /// Events the server no longer keeps were missed while disconnected: these seqs are lost.
    case missed(ClosedRange<Int>)
    /// The room's history was lost on the server (it restarted with no memory, or evicted the
    /// room): its epoch changed from `previousEpoch`, so the client could not resume where it
    /// left off. Events after `missedAfter` (the time of the last event seen, if any) may be
    /// missing; the client goes on with the new epoch from its start (every event the server
    /// keeps of it follows) and resends what was not acknowledged.
    case historyReset(previousEpoch: String, missedAfter: Date?)
    /// The connection closed. With `reconnecting`, the client reconnects and resumes where it
    /// left off; without, it stays closed.
    case disconnected(WebSocketDisconnectReason, reconnecting: Bool)
}

/// A client for Duplex chat rooms (`ws://HOST:PORT/chat/ROOM`, see `docs/protocol.md`) that
/// loses nothing across reconnections: it rejoins with `since=` the last seq it saw, reports each
/// room event exactly once, and resends what it said until the server acknowledges it (the server
/// drops the duplicates).
///
/// ```swift
/// let chat = ChatClient(url: URL(string: "ws://127.0.0.1:8080/chat/lobby")!, name: "alice")
/// let events = chat.events
/// try await chat.join()
/// try await chat.say("hello")
/// for await event in events {
///     if case .message(let message) = event { print("\(message.from): \(message.text)") }
/// }
/// ```
///
/// It runs over a ``WebSocket`` (``socket``) with automatic reconnection and keep-alive pings by
/// default. A join the server refuses (a bad name or room) ends the connection for good.
public final class ChatClient: Sendable {
    /// The socket the client runs over: for its state, pings and round-trip times.
    public let socket: WebSocket
    /// The room URL, without `name` and `since`.
    public let url: URL
    /// The name this client joins with.
    public let name: String

    private let core: ChatClientCore

    /// The socket configuration a chat client uses by default: reconnection with exponential
    /// backoff (0.5 s, doubling up to 10 s, without limit) and a ping every 10 s.
    public static var defaultConfiguration: WebSocketConfiguration {
        WebSocketConfiguration(
            ping: PingConfig(pingInterval: .seconds(10), maxPingFailures: 2),
            reconnection: .exponentialBackoff(baseDelay: .milliseconds(500), maxDelay: .seconds(10))
        )
    }

    /// Creates a client for the room at `url` (`ws://` or `wss://`, path `/chat/ROOM`).
    /// Nothing connects until ``join(timeout:)``.
    public convenience init(url: URL, name: String, configuration: WebSocketConfiguration = ChatClient.defaultConfiguration) {
        self.init(url: url, name: name, configuration: configuration, clock: ContinuousClock())
    }

    /// Creates a client whose timers (reconnection delays, pings, the join's and the delivery's
    /// time limits) run on `clock`: a test's clock, such as DuplexTesting's `TestClock`.
    public init(url: URL, name: String, configuration: WebSocketConfiguration = ChatClient.defaultConfiguration, clock: some Clock<Duration>) {
        self.url = url
        self.name = name
        self.socket = WebSocket(
            request: WebSocketRequest(url: url), configuration: configuration, clock: clock, policy: ChatClientCore.policy(configuration))
        self.core = ChatClientCore(name: name, socket: socket, configuration: configuration)
        socket.prepareRequest = { [weak core] request in
            var request = request
            if let core { request.url = core.joinURL(url) }
            return request
        }
    }

    deinit {
        socket.terminateNow()
    }

    /// A new stream of every event from now on; each consumer gets its own.
    public var events: AsyncStream<ChatEvent> { core.events.makeStream() }

    /// A new stream of every event from now on, buffered as `buffering` says.
    public func events(buffering: StreamBuffering) -> AsyncStream<ChatEvent> {
        core.events.makeStream(buffering: buffering)
    }

    /// The names present in the room, sorted (a name twice when connected twice).
    public var members: [String] { core.box.withLockedValue { $0.session.members } }

    /// The seq of the newest room event seen, if any: where a reconnection resumes.
    public var lastSeq: Int? { core.box.withLockedValue { $0.session.lastSeq } }

    /// How many messages said wait for the server's acknowledgement.
    public var pendingCount: Int { core.box.withLockedValue { $0.session.pending.count } }

    /// Connects and joins the room; returns the server's welcome. On a joined client, returns the
    /// current connection's welcome at once.
    /// - Throws: ``WebSocketError`` when the connection fails or no welcome came within
    ///   `timeout` (``WebSocketError/Code/connectTimeout``), `ChatProtocolError` when the server
    ///   refused the join (a bad room or name, or its room limit).
    @discardableResult
    public func join(timeout: Duration = .seconds(10)) async throws -> ChatWelcome {
        try await core.join(timeout: timeout)
    }

    /// Says `text` in the room and returns the frame sent, with its client message id. The
    /// message is resent after each reconnection until the server acknowledges it
    /// (``ChatEvent/delivered(_:)``).
    /// - Throws: `ChatProtocolError` when the text breaks the protocol's rules (empty, or
    ///   over 4096 bytes), ``WebSocketError`` (``WebSocketError/Code/notConnected``) before
    ///   ``join(timeout:)`` or after ``leave()``.
    @discardableResult
    public func say(_ text: String) async throws -> ChatSay {
        try ChatLimits().validate(text: text)
        return try core.say(text)
    }

    /// Waits until every message said is acknowledged; false when `timeout` passed first.
    public func waitForDelivery(timeout: Duration) async -> Bool {
        await core.waitForDelivery(timeout: timeout)
    }

    /// Checks the connection at once because the network path changed or the app resumed, and
    /// reconnects now, the backoff reset, when it does not answer within `deadline`: the client
    /// rejoins, resumes after its last seq, and resends what was not acknowledged, so nothing
    /// is lost or shown twice. See ``WebSocket/checkConnection(within:)``.
    /// - Returns: true when the connection answered (or there was none to check).
    @discardableResult
    public func checkConnection(within deadline: Duration = .seconds(2)) async -> Bool {
        await socket.checkConnection(within: deadline)
    }

    /// Leaves the room: closes the connection with 1000, for good.
    public func leave() async {
        core.box.withLockedValue { $0.left = true }
        await socket.disconnect()
    }
}

/// The engine behind a ``ChatClient``: feeds frames to ``ChatSession`` and acts on its reactions.
///
/// When to reconnect is the socket's decision (its lifecycle, with ``policy(_:)``): after any
/// loss but a refused join, a 1000 included, until the strategy gives up. The client only reads
/// what the socket reports, in order: messages with their connection, and losses with whether
/// the socket reconnects.
final class ChatClientCore: Sendable {
    struct State: DeferringWork {
        var session: ChatSession
        var welcome: ChatWelcome?
        var everJoined = false
        var refused: ChatErrorFrame?
        var left = false
        var joinWaiters = Waiters<ChatWelcome>()
        var deliveryWaiters = Waiters<Void>()
        var afterUnlock: [@Sendable () -> Void] = []
    }

    let box: NIOLockedValueBox<State>
    let events: Broadcaster<ChatEvent>
    private let socket: WebSocket

    /// The socket's lifecycle policy for a chat client: a connection proves itself with its
    /// welcome; a 1000 is retried (the Duplex chat server never ends a member with it: a 1000 the
    /// client did not ask for comes from a server going down, swift-websocket's graceful shutdown);
    /// a 1008 or 1013 with a reason before the welcome is a refused join, final.
    static func policy(_ configuration: WebSocketConfiguration) -> WebSocketPolicy {
        WebSocketPolicy(
            strategy: configuration.reconnection,
            maxQueued: configuration.maxQueuedSends,
            provedOnOpen: false,
            retriesNormalClosure: true,
            refusalCodes: [.policyViolation, .tryAgainLater]
        )
    }

    init(name: String, socket: WebSocket, configuration: WebSocketConfiguration) {
        self.box = NIOLockedValueBox(State(session: ChatSession(name: name)))
        let gate = DemandGate()
        self.events = Broadcaster(
            limit: configuration.streamBufferLimit,
            buffering: configuration.streamBuffering,
            gate: gate,
            label: "chatEvents",
            logger: configuration.logger
        )
        self.socket = socket
        let reports = socket.reports
        let events = self.events
        // Holds the core, not the ChatClient: releasing the client terminates the socket, which
        // ends its reports and so this pump.
        Task { [self] in
            for await report in reports {
                switch report {
                case .message(let message, let connection):
                    self.handle(message, on: connection)
                case .opened:
                    break
                case .disconnected(let reason, let reconnecting):
                    self.handle(disconnected: reason, reconnecting: reconnecting)
                }
                // A reader of `events` behind: read no more frames, so the socket's own buffer
                // fills and it stops reading from the network.
                await gate.waitUntilOpen()
            }
            events.finish()
        }
    }

    /// Writes `say` on `connection` at once, under the lock, so that a resend and a new message
    /// go out in the order in which they were decided. Each message goes out on the connection
    /// that was welcomed when it was decided, or not at all: it stays pending, and the next
    /// welcome resends every pending message in order. So the server gets them in the order they
    /// were said, whatever the drops.
    private func write(_ say: ChatSay, on connection: UInt64) {
        guard let json = try? ChatClientFrame.say(say).jsonString() else { return }
        socket.write(.string(json), onConnection: connection)
    }

    func joinURL(_ url: URL) -> URL {
        box.withLockedValue { $0.session.joinURL(url) }
    }

    func join(timeout: Duration) async throws -> ChatWelcome {
        let connected = if case .connected = socket.state { true } else { false }
        let joined: ChatWelcome? = box.withLockedValue { state in
            if connected, state.session.welcomedConnection != nil, let welcome = state.welcome { return welcome }
            state.refused = nil
            state.left = false
            return nil
        }
        if let joined { return joined }
        do {
            return try await waitForWelcome(timeout: timeout)
        } catch {
            // A failed join leaves nothing running: no reconnection in the background.
            await socket.disconnect(code: .normalClosure, reason: "")
            throw error
        }
    }

    private func waitForWelcome(timeout: Duration) async throws -> ChatWelcome {
        let socket = self.socket
        return try await withDeadline(
            timeout,
            clock: socket.clock,
            orThrow: { WebSocketError(.connectTimeout, "no welcome from the chat server within \(timeout)") }
        ) {
            try await self.box.wait(in: \.joinWaiters) { _ in
                // Ends when the socket's attempt does (its connect timeout bounds it). Started
                // under the lock, so the waiter is in place before the attempt can report.
                Task {
                    do {
                        try await socket.connect()
                    } catch {
                        self.box.locked { $0.joinWaiters.takeAll() }.resume(throwing: error)
                    }
                }
                return nil
            }
        }
    }

    func say(_ text: String) throws -> ChatSay {
        try box.withLockedValue { state in
            guard state.everJoined, !state.left, state.refused == nil else {
                throw WebSocketError(.notConnected, "join the room before saying anything")
            }
            let say = state.session.say(text)
            // Not welcomed: the next welcome resends every pending message, this one included.
            if let connection = state.session.welcomedConnection { write(say, on: connection) }
            return say
        }
    }

    func waitForDelivery(timeout: Duration) async -> Bool {
        let delivered: Void? = try? await withDeadline(timeout, clock: socket.clock, orThrow: { CancellationError() }) {
            try await self.box.wait(in: \.deliveryWaiters) { $0.session.pending.isEmpty ? .success(()) : nil }
        }
        return delivered != nil
    }

    private func handle(_ message: WebSocketMessage, on connection: UInt64) {
        guard let text = message.text, let frame = try? ChatServerFrame.decode(Data(text.utf8)) else {
            socket.configuration.logger.warning("not a chat frame; ignored", metadata: ["bytes": "\(message.data.count)"])
            return
        }
        let reaction = box.locked { state in
            let reaction = state.session.received(frame, on: connection)
            for say in reaction.send { write(say, on: connection) }
            if case .welcome(let welcome) = frame {
                state.welcome = welcome
                state.everJoined = true
                state.resume(state.joinWaiters.takeAll(), with: .success(welcome))
            }
            if let refused = reaction.refused {
                state.refused = refused
                state.resume(state.joinWaiters.takeAll(), with: .failure(ChatProtocolError(refused.code, refused.reason)))
            }
            if state.session.pending.isEmpty {
                state.resume(state.deliveryWaiters.takeAll(), with: .success(()))
            }
            return reaction
        }
        if case .welcome = frame { socket.proved(connection: connection) }
        for event in reaction.events { events.yield(event) }
        if reaction.refused != nil { socket.close() }
    }

    /// The socket lost its connection (`reconnecting`: it tries again) or ended.
    private func handle(disconnected reason: WebSocketDisconnectReason, reconnecting: Bool) {
        let report = box.locked { state in
            // A join waits through the socket's reconnections, within its timeout (a connection
            // can end before its first frame is read); when none follows, it fails now.
            if !reconnecting, state.refused == nil {
                state.resume(state.joinWaiters.takeAll(), with: .failure(Self.joinError(reason)))
            }
            return state.everJoined || state.refused != nil
        }
        if report { events.yield(.disconnected(reason, reconnecting: reconnecting)) }
    }

    /// What a join that waited throws when the socket ended before the welcome.
    private static func joinError(_ reason: WebSocketDisconnectReason) -> any Error {
        switch reason {
        case .error(let error):
            return error
        case .closed(let code, let why):
            // A refused join closes with 1008 (1013 at the room limit) and the error code as the
            // reason; the error frame before it may not be processed yet.
            if code == .policyViolation || code == .tryAgainLater, !why.isEmpty {
                return ChatProtocolError(ChatErrorCode(why), "closed with \(code.rawValue) before the welcome")
            }
            return WebSocketError(.connectionLost, "closed with \(code.rawValue)\(why.isEmpty ? "" : ": \(why)") before the welcome", closeCode: code)
        default:
            return WebSocketError(.connectionLost, "disconnected before the welcome: \(reason)")
        }
    }
}
