public import DuplexSchema
public import Foundation

/// A Server-Sent Events client: spec-exact parsing, reconnection with `Last-Event-ID`, and a
/// clean stop. Runs on SwiftNIO, on Linux and Apple platforms, and connects exactly as
/// ``WebSocket`` does (the same proxies, TLS checks, pins and client certificates); redirects
/// are followed, up to 5.
///
/// ```swift
/// let sse = ServerSentEventManager(url: URL(string: "http://127.0.0.1:8080/events")!)
/// let events = sse.events
/// try await sse.connect()
/// for await event in events {
///     print(event.id ?? "-", event.event ?? "message", event.data)
/// }
/// ```
///
/// Lifecycle:
/// - ``connect()`` opens the stream and returns once it is open (retrying network errors as
///   the policy allows). It throws when the stream cannot be opened for good. On a connected
///   manager it returns at once.
/// - ``disconnect()`` closes the stream; the streams of events and states stay open, and
///   ``connect()`` again resumes with `Last-Event-ID`.
/// - ``terminate()`` closes, finishes every stream, and prevents reconnection. So does releasing
///   the last reference.
///
/// Streaming APIs: an ``SSERequest`` with a method other than `GET` and a body (a completion, a
/// search) is answered once: it is never sent again after the server answered unless
/// ``SSERequest/isResumable`` says so, and its stream finishes at a clean end or at its
/// ``SSERequest/terminalEvent`` (``hasFinished``); a drop fails it. A refused request's
/// ``SSEError`` holds the server's answer with its body (``SSEError/response``).
///
/// Reconnection, per the WHATWG HTML Standard and the ``RetryPolicy``: after the stream ends or
/// fails, the manager waits (the server's `retry:` value, else `initialDelay`, growing with each
/// failure in a row) and reopens the stream, sending the last event id committed at dispatch as
/// `Last-Event-ID` (none after an empty `id:`). A partial line or event from the dropped stream
/// is discarded. A 204 answer stops for good; so does any other non-2xx answer or a content type
/// other than `text/event-stream`, unless ``SSEConfiguration/retryOnServerErrors`` covers a 5xx or
/// 429. No bytes for ``SSEConfiguration/readTimeout`` counts as a dead connection and reconnects.
public final class ServerSentEventManager: Sendable {
    let core: ServerSentEventCore

    /// Creates a manager for `url`. Nothing connects until ``connect()``.
    public convenience init(url: URL, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(request: SSERequest(url: url), retryPolicy: retryPolicy, configuration: configuration)
    }

    /// Creates a manager for a URL string, as seed code writes it. A malformed URL, or one that
    /// is not `http://` or `https://`, makes ``connect()`` throw ``SSEError`` with code
    /// ``SSEError/Code/invalidURL``.
    public convenience init(url: String, retryPolicy: RetryPolicy = .init(), configuration: SSEConfiguration = .init()) {
        self.init(request: SSERequest(url: url), retryPolicy: retryPolicy, configuration: configuration)
    }

    /// Creates a manager for a request with extra headers.
    /// - Parameters:
    ///   - request: the URL and the headers to send.
    ///   - retryPolicy: the delays between reconnection attempts.
    ///   - configuration: limits and timeouts.
    ///   - lastEventID: an id to resume after, sent as `Last-Event-ID` on the first connection.
    public convenience init(
        request: SSERequest,
        retryPolicy: RetryPolicy = .init(),
        configuration: SSEConfiguration = .init(),
        lastEventID: String? = nil
    ) {
        self.init(request: request, retryPolicy: retryPolicy, configuration: configuration, lastEventID: lastEventID, clock: ContinuousClock())
    }

    /// Creates a manager whose retry delays run on `clock`.
    public init(
        request: SSERequest,
        retryPolicy: RetryPolicy,
        configuration: SSEConfiguration,
        lastEventID: String? = nil,
        clock: some Clock<Duration>
    ) {
        self.core = ServerSentEventCore(
            request: request, retryPolicy: retryPolicy, configuration: configuration, lastEventID: lastEventID ?? "", clock: clock)
    }

    deinit {
        core.terminate()
    }

    /// A new stream of every event from now on; each consumer gets its own. Lossless by
    /// default: a reader that falls behind holds the stream back (see ``StreamBuffering``).
    public var events: AsyncStream<ServerSentEvent> { core.events.makeStream() }

    /// A new stream of every event from now on, buffered as `buffering` says.
    public func events(buffering: StreamBuffering) -> AsyncStream<ServerSentEvent> {
        core.events.makeStream(buffering: buffering)
    }

    /// A new stream of the current state, then every change; each consumer gets its own.
    public var stateEvents: AsyncStream<SSEState> { core.makeStateStream() }

    /// The current state.
    public var state: SSEState { core.state }

    /// How the manager reconnects.
    public var retryPolicy: RetryPolicy { core.retryPolicy }

    /// The last event id committed at dispatch: sent as `Last-Event-ID` on the next connection
    /// (nil when empty).
    public var lastEventID: String? { core.lastEventID }

    /// The reconnection time the server set with `retry:`, if it did.
    public var serverRetry: Duration? { core.serverRetry }

    /// Whether the stream finished for good: its ``SSERequest/terminalEvent`` arrived, or the
    /// answer to a request that is not ``SSERequest/isResumable`` ended cleanly. The state is
    /// then `disconnected(.streamEnded)`, every stream of events and states has finished, and
    /// ``connect()`` throws ``SSEError/Code/finished``. A drop is not a finish: the state says
    /// `streamError`.
    public var hasFinished: Bool { core.hasFinished }

    /// A new stream of every event from now on, its data decoded from JSON as `type`.
    ///
    /// It ends when the manager's streams do: normally when the stream finished, or after
    /// ``disconnect()`` or ``terminate()``; with the error when a request that is not resumable
    /// (or one whose retries ran out) failed for good, so that a drop is never taken for the end.
    /// The terminal event is not decoded. An event whose data is not a `type` ends it with
    /// ``SSEDecodingError``, which holds the event.
    ///
    /// ```swift
    /// struct Token: Decodable { var text: String }
    /// let tokens = sse.events(decoding: Token.self)
    /// try await sse.connect()
    /// for try await token in tokens { print(token.text, terminator: "") }
    /// ```
    /// - Parameters:
    ///   - type: what each event's data is.
    ///   - decoder: how to decode it.
    ///   - buffering: how the stream buffers for a reader that falls behind.
    public func events<T: Decodable & Sendable>(
        decoding type: T.Type,
        decoder: JSONDecoder = JSONDecoder(),
        buffering: StreamBuffering? = nil
    ) -> AsyncThrowingStream<T, any Error> {
        let events = EventSource(core.events.makeStream(buffering: buffering))
        let core = self.core
        let terminalEvent = core.request.terminalEvent
        return AsyncThrowingStream {
            while let event = await events.next() {
                if terminalEvent?.matches(event) == true { continue }
                return try event.decode(T.self, decoder: decoder)
            }
            if case .disconnected(.streamError(let error)) = core.state { throw error }
            return nil
        }
    }

    /// Called before each connection attempt, the first and every reconnection, to rebuild the
    /// request: for example to refresh an `Authorization` header.
    public var prepareRequest: (@Sendable (SSERequest) async -> SSERequest)? {
        get { core.prepareRequest }
        set { core.prepareRequest = newValue }
    }

    /// Checks the stream at once, because the network path changed or the app resumed, when an
    /// open stream is often half-open: nothing arrives and nothing fails.
    ///
    /// The open stream must bring some bytes (an event, or a heartbeat comment) within
    /// `deadline`; when it does not, it is reopened at once, with the backoff reset, resuming
    /// with `Last-Event-ID`. A reconnection waiting out a backoff starts now. A stream whose
    /// request is not ``SSERequest/isResumable`` is left alone, since it cannot be sent again.
    /// Call it from `NWPathMonitor`'s update handler or when `scenePhase` becomes `.active`;
    /// pick a deadline longer than the server's heartbeat interval.
    /// - Parameter deadline: how long the stream may stay silent. Default 2 s.
    /// - Returns: true when the stream answered (or there was none to check); false when it was
    ///   found silent and reopened.
    @discardableResult
    public func checkConnection(within deadline: Duration = .seconds(2)) async -> Bool {
        await core.checkConnection(within: deadline)
    }

    /// Opens the stream; returns once it is open, at once when it already is.
    /// - Throws: ``SSEError``: the stream cannot be opened for good (a 204, a non-2xx answer, a
    ///   wrong content type, a bad URL or TLS failure), retries ran out, or ``disconnect()`` or
    ///   ``terminate()`` was called first.
    public func connect() async throws {
        try await core.connect()
    }

    /// Closes the stream. Event and state streams stay open; ``connect()`` resumes with
    /// `Last-Event-ID`. Does nothing when not connected.
    public func disconnect() async {
        await core.disconnect()
    }

    /// Closes the stream, finishes every event and state stream, and prevents reconnection.
    public func terminate() async {
        core.terminate()
        await core.waitForRunToEnd()
    }
}

extension ServerSentEvent {
    /// This event's data decoded from JSON as `type`.
    /// - Throws: ``SSEDecodingError``, with this event, when the data is not a `type`.
    public func decode<T: Decodable>(_ type: T.Type = T.self, decoder: JSONDecoder = JSONDecoder()) throws(SSEDecodingError) -> T {
        do {
            return try decoder.decode(T.self, from: Data(data.utf8))
        } catch {
            throw SSEDecodingError(event: self, type: String(describing: T.self), underlying: error)
        }
    }
}

/// An event stream's iterator for the unfolding closure of a typed stream, which calls it one
/// call at a time. `@unchecked Sendable`: `AsyncThrowingStream(unfolding:)` awaits each call
/// before it makes the next, so the iterator is never used from two tasks at once.
private final class EventSource: @unchecked Sendable {
    private var iterator: AsyncStream<ServerSentEvent>.AsyncIterator

    init(_ stream: AsyncStream<ServerSentEvent>) {
        iterator = stream.makeAsyncIterator()
    }

    func next() async -> ServerSentEvent? {
        await iterator.next()
    }
}
