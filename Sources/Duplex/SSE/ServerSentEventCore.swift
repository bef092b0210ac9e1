import DuplexSchema
import DuplexWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// The engine behind a ``ServerSentEventManager``: runs ``ConnectionLifecycle`` with
/// ``SSEPolicy`` and performs its actions, as ``WebSocketCore`` does for a socket. Each attempt
/// is a task that sends the request (on a connection of its own, made as the WebSocket client
/// makes its: ``ClientConnector``), follows redirects, reports the opening, and reads the body
/// into ``events`` until the stream ends; the lifecycle decides what follows.
final class ServerSentEventCore: LifecycleRunner {
    let request: SSERequest
    let retryPolicy: RetryPolicy
    let configuration: SSEConfiguration
    let clock: any Clock<Duration>
    let metrics: ClientMetrics
    let events: Broadcaster<ServerSentEvent>
    let states: Broadcaster<SSEState>
    /// Closed while a lossless consumer of ``events`` is behind: the body is read no further.
    let gate = DemandGate()
    struct State: LifecycleState {
        var lifecycle: ConnectionLifecycle<SSEPolicy>
        /// The last state published.
        var state: SSEState = .notConnected
        var lastEventID = ""
        var serverRetryMilliseconds: Int?
        /// The attempt under way or the stream being read, by generation.
        var attempt: (generation: UInt64, task: Task<Void, Never>)?
        var retryTimer: Task<Void, Never>?
        var connectWaiters = Waiters<Void>()
        var disconnectWaiters = Waiters<Void>()
        /// Chunks read from the live stream, and who waits for the next (``checkConnection(within:)``).
        var chunks: UInt64 = 0
        var chunkWaiters = Waiters<Void>()
        var prepareRequest: (@Sendable (SSERequest) async -> SSERequest)?
        var afterUnlock: [@Sendable () -> Void] = []
    }

    private let box: NIOLockedValueBox<State>
    var lifecycleBox: NIOLockedValueBox<State> { box }
    var logger: Logger { configuration.logger }

    init(request: SSERequest, retryPolicy: RetryPolicy, configuration: SSEConfiguration, lastEventID: String, clock: any Clock<Duration>) {
        self.request = request
        self.retryPolicy = retryPolicy
        self.configuration = configuration
        self.clock = clock
        self.metrics = ClientMetrics(kind: "sse", factory: configuration.metrics)
        self.events = Broadcaster(
            limit: configuration.streamBufferLimit,
            byteLimit: configuration.streamBufferBytes,
            cost: { $0.data.utf8.count },
            buffering: configuration.streamBuffering,
            gate: gate,
            label: "sse.events",
            logger: configuration.logger
        )
        self.states = Broadcaster(
            limit: configuration.streamBufferLimit,
            buffering: .newest(configuration.streamBufferLimit),
            label: "sse.stateEvents",
            logger: configuration.logger
        )
        var state = State(lifecycle: ConnectionLifecycle(policy: SSEPolicy(strategy: retryPolicy, resumable: request.isResumable)))
        state.lastEventID = lastEventID
        self.box = NIOLockedValueBox(state)
    }

    var state: SSEState { box.locked { $0.state } }
    var lastEventID: String? { box.locked { $0.lastEventID.isEmpty ? nil : $0.lastEventID } }
    var serverRetry: Duration? { box.locked { $0.serverRetryMilliseconds.map { .milliseconds($0) } } }

    /// The stream finished for good: its terminal event arrived, or a request that is not
    /// resumable was answered to its end.
    var hasFinished: Bool {
        box.locked { state in
            if case .ended(.lost(let loss)) = state.lifecycle.phase { loss.finished } else { false }
        }
    }

    var prepareRequest: (@Sendable (SSERequest) async -> SSERequest)? {
        get { box.locked { $0.prepareRequest } }
        set { box.locked { $0.prepareRequest = newValue } }
    }

    func makeStateStream() -> AsyncStream<SSEState> {
        box.locked { states.makeStream(startingWith: $0.state) }
    }

    // MARK: Requests

    func connect() async throws {
        try request.validate()
        try await requestConnect()
    }

    func disconnect() async {
        await requestDisconnect(code: .normalClosure, reason: "")
    }

    func terminate() {
        requestTerminate()
    }

    func connectError(_ failure: Lifecycle.Failure, atOnce: Bool) -> any Error {
        failure.error(retryPolicy: retryPolicy)
    }

    /// The network path changed or the app resumed: the open stream must bring some bytes (an
    /// event or a heartbeat comment) within `deadline`, or it is reopened at once, the backoff
    /// reset, resuming with `Last-Event-ID`; a reconnection waiting out a backoff starts now. A
    /// stream that is not resumable is left alone: it cannot be reopened. True when the stream
    /// answered (or there was nothing to check).
    func checkConnection(within deadline: Duration) async -> Bool {
        let decision = box.locked { state -> (ConnectionLifecycle<SSEPolicy>.CheckDecision, UInt64) in
            let decision = state.lifecycle.networkChanged()
            if case .reconnectNow(let actions) = decision {
                let logger = self.logger
                state.afterUnlock.append { logger.info("the network changed: reconnecting now") }
                perform(actions, in: &state)
            }
            return (decision, state.chunks)
        }
        guard case (.probe(let generation), let before) = decision, request.isResumable else { return true }
        let arrived =
            (try? await withDeadline(deadline, clock: clock, orThrow: { SSEError(.readTimeout, "") }) {
                try await self.box.wait(in: \.chunkWaiters) { state in state.chunks != before ? .success(()) : nil }
            }) != nil
        if arrived { return true }
        return box.locked { state in
            // A reader that is behind holds the body back: its silence is not the network's.
            guard state.chunks == before, gate.isOpen else { return true }
            let error = SSEError(.readTimeout, "nothing arrived within \(deadline) after the network changed")
            let logger = self.logger
            state.afterUnlock.append { logger.info("the network changed and the stream was silent: reopening it now") }
            perform(state.lifecycle.checkFailed(generation: generation, loss: SSELoss(reason: .streamError(error), retry: .policy())), in: &state)
            return false
        }
    }

    /// Returns once the attempt or stream under way (cancelled by ``terminate()``) has ended.
    func waitForRunToEnd() async {
        await box.locked { $0.attempt?.task }?.value
    }

    // MARK: The lifecycle's actions

    /// Carries out the lifecycle's actions that are the stream's own, under the lock.
    func performOwn(_ action: Lifecycle.Action, in state: inout State) {
        switch action {
        case .startConnecting(let generation):
            // Ends when the stream does, or when the lifecycle cancels it (below).
            state.attempt = (generation, Task(on: clock) { await self.attempt(generation: generation) })
        case .cancelAttempt, .closeConnection, .abortConnection:
            state.attempt?.task.cancel()
        case .discardConnection, .flush, .deliverHeld, .startPinging, .stopPinging, .opened, .lost, .closedAsAsked, .dropQueued:
            // The attempt stops itself when its opening is discarded; an event stream has no
            // pings, no held events (nothing is read before the opening) and sends nothing.
            break
        case .attemptFailed(let loss, let willRetry):
            if !willRetry, loss.retry == .never {
                let (logger, reason) = (configuration.logger, loss.reason)
                state.afterUnlock.append { logger.warning("SSE stream failed for good", metadata: ["reason": "\(reason)"]) }
            }
        case .publish(let status):
            let new = status.state
            if state.state != new {
                state.state = new
                states.yield(new)
            }
        case .finish:
            events.finish()
            states.finish()
        case .scheduleRetry, .cancelRetryTimer, .resumeConnectWaiters, .resumeDisconnectWaiters:
            break  // the runner's (LifecycleRunner.perform)
        }
    }

    // MARK: Reports

    /// The response of `generation` is an event stream; false when it is no longer wanted.
    private func opened(generation: UInt64) -> Bool {
        box.locked { state in
            let actions = state.lifecycle.connectSucceeded(generation: generation)
            if case .discardConnection = actions.first { return false }
            perform(actions, in: &state)
            return true
        }
    }

    /// The attempt of `generation` failed (`opened`: false) or its stream ended (true).
    private func ended(generation: UInt64, opened: Bool, loss: SSELoss) {
        box.locked { state in
            var loss = loss
            // A request that is not resumable is never sent again once answered: its clean end is
            // its finish, and a drop is final.
            if opened, !request.isResumable {
                loss.retry = .never
                if loss.reason == .streamEnded { loss.finished = true }
            }
            // The server's `retry:` is its wish for the delay of every reconnection.
            if loss.retry == .policy(suggested: nil), let wish = state.serverRetryMilliseconds {
                loss.retry = .policy(suggested: .milliseconds(wish))
                let metrics = self.metrics
                state.afterUnlock.append { metrics.appliedRetry(milliseconds: wish) }
            }
            let actions =
                opened
                ? state.lifecycle.connectionLost(generation: generation, loss: loss)
                : state.lifecycle.connectFailed(generation: generation, loss: loss)
            perform(actions, in: &state)
        }
    }

    /// Events parsed from the stream of `generation`: delivered while it is the live one.
    private func received(_ parsed: [ServerSentEvent], parser: ServerSentEventParser, generation: UInt64) {
        // Counted as they arrive, before the lock: the metrics backend is not our code.
        for event in parsed { metrics.received(bytes: event.data.utf8.count) }
        box.locked { state in
            guard state.lifecycle.received(generation: generation) == .deliver else { return }
            state.chunks += 1
            if !state.chunkWaiters.isEmpty { state.resume(state.chunkWaiters.takeAll(), with: .success(())) }
            for event in parsed { events.yield(event) }
            if !parsed.isEmpty { state.lifecycle.proved(generation: generation) }
            state.lastEventID = parser.lastEventID
            state.serverRetryMilliseconds = parser.reconnectionTime ?? state.serverRetryMilliseconds
        }
    }

    // MARK: An attempt

    private func attempt(generation: UInt64) async {
        var current = request
        if let prepare = box.locked({ $0.prepareRequest }) { current = await prepare(current) }
        let lastEventID = box.locked { $0.lastEventID }
        var parser = ServerSentEventParser(lastEventID: lastEventID, configuration: .init(maxEventBytes: configuration.maxEventBytes))
        var isOpen = false
        var url = current.url
        do {
            var opened = try await open(current, lastEventID: lastEventID)
            // Redirects are followed, as fetch does, up to 5, never in a cycle; credentials are not
            // sent to another origin. A 303, and a 301 or 302 to a POST, turn the request into a
            // GET without its body; a 307 and a 308 send it again as it was.
            var visited: Set<String> = [url.absoluteString]
            while Self.redirects.contains(opened.head.status.code) {
                await opened.body.close()
                let status = Int(opened.head.status.code)
                let location = opened.head.headers.first(name: "Location") ?? ""
                guard let next = URL(string: location, relativeTo: url)?.absoluteURL, ["http", "https"].contains(next.scheme?.lowercased() ?? "")
                else {
                    throw SSEError(
                        .badStatus,
                        "the server redirected (HTTP \(status)) to \(location.isEmpty ? "no location" : String(location.prefix(200)).debugDescription), which is not an http or https URL",
                        status: status)
                }
                guard visited.count <= Self.maxRedirects else {
                    throw SSEError(.badStatus, "the server redirected more than \(Self.maxRedirects) times (HTTP \(status))", status: status)
                }
                guard visited.insert(next.absoluteString).inserted else {
                    throw SSEError(.badStatus, "the server's redirects form a cycle back to \(next.absoluteString.prefix(200))", status: status)
                }
                current = Self.redirected(current, status: status, from: url, to: next)
                url = next
                opened = try await open(current, lastEventID: lastEventID)
            }
            let terminalEvent = current.terminalEvent
            try await opened.body.readThenClose { chunks in
                if let failure = try await check(opened.head, body: &chunks, connection: opened.body, resumable: current.isResumable) {
                    ended(generation: generation, opened: false, loss: failure)
                    return
                }
                guard self.opened(generation: generation) else { return }
                isOpen = true
                while let chunk = try await chunks.next() {
                    var parsed = try parser.parse(chunk.readableBytesView)
                    if let terminalEvent, let last = parsed.firstIndex(where: terminalEvent.matches) {
                        // Delivered, and nothing after it: the stream is over.
                        parsed.removeSubrange((last + 1)...)
                        received(parsed, parser: parser, generation: generation)
                        ended(generation: generation, opened: true, loss: .finish)
                        return
                    }
                    received(parsed, parser: parser, generation: generation)
                    // A reader behind: read no more of the body (the connection then stops reading
                    // the socket) until it catches up.
                    await gate.waitUntilOpen()
                }
                parser.finish()
                ended(generation: generation, opened: true, loss: SSELoss(reason: .streamEnded, retry: .policy()))
            }
        } catch {
            parser.finish()
            let described = Self.describe(error, url: url)
            ended(
                generation: generation, opened: isOpen,
                loss: SSELoss(
                    reason: .streamError(described),
                    retry: [.tlsFailed, .proxyFailed, .invalidURL, .invalidHeader, .invalidRequest, .badStatus].contains(described.code)
                        ? .never : .policy()))
        }
    }

    /// The request to send to `next` after a redirect with `status` from `url`.
    static func redirected(_ request: SSERequest, status: Int, from url: URL, to next: URL) -> SSERequest {
        var request = request
        request.url = next
        if status == 303 && request.method != .get || (status == 301 || status == 302) && request.method == .post {
            let resumable = request.isResumable
            request.method = .get
            request.body = nil
            request.isResumable = resumable
            let bodyHeaders: Set<String> = ["content-type", "content-encoding", "content-language", "content-location", "content-length"]
            request.additionalHeaders = request.additionalHeaders.filter { !bodyHeaders.contains($0.key.lowercased()) }
        }
        if origin(next) != origin(url) {
            request.additionalHeaders = request.additionalHeaders.filter {
                !["authorization", "cookie", "proxy-authorization"].contains($0.key.lowercased())
            }
        }
        return request
    }

    /// The statuses whose `Location` is followed.
    private static let redirects: Set<UInt> = [301, 302, 303, 307, 308]
    private static let maxRedirects = 5

    /// Scheme, host and port: what decides whether credentials follow a redirect.
    private static func origin(_ url: URL) -> String {
        let scheme = url.scheme?.lowercased() ?? ""
        return "\(scheme)://\(url.host?.lowercased() ?? ""):\(url.port ?? (scheme == "https" ? 443 : 80))"
    }

    /// Sends `request` and returns with its response head.
    private func open(_ request: SSERequest, lastEventID: String) async throws -> EventStreamResponse {
        let endpoint: WebSocketRequest.Endpoint
        do {
            endpoint = try WebSocketRequest(url: request.url).endpoint()
        } catch let error as WebSocketError {
            throw SSEError(.invalidURL, error.message)
        }
        if let problem = RequestHeaderCheck.problem(request.additionalHeaders) {
            throw SSEError(.invalidHeader, problem)
        }
        if let problem = request.method.problem {
            throw SSEError(.invalidRequest, problem)
        }
        var httpHeaders = HTTPHeaders()
        httpHeaders.add(name: "Host", value: endpoint.hostHeader)
        for (name, value) in request.additionalHeaders.sorted(by: { $0.key < $1.key }) {
            httpHeaders.replaceOrAdd(name: name, value: value)
        }
        httpHeaders.replaceOrAdd(name: "Accept", value: "text/event-stream")
        httpHeaders.replaceOrAdd(name: "Cache-Control", value: "no-cache")
        if !lastEventID.isEmpty {
            httpHeaders.replaceOrAdd(name: "Last-Event-ID", value: lastEventID)
        }
        if let body = request.body {
            httpHeaders.replaceOrAdd(name: "Content-Length", value: String(body.count))
        } else if request.method != .get {
            httpHeaders.replaceOrAdd(name: "Content-Length", value: "0")
        }
        return try await (configuration.transport ?? EventStreamConnection()).open(
            endpoint: endpoint,
            method: HTTPMethod(rawValue: request.method.rawValue),
            headers: httpHeaders,
            body: request.body,
            configuration: configuration
        )
    }

    /// A failure for a response that cannot be read as an event stream, or nil. For an answer
    /// that is not a stream, its body is read (up to ``SSEErrorResponse/bodyLimit``, within the
    /// connect timeout) into the error. A request that is not resumable is retried only after a
    /// 429 or a 503, which say that the server did not act on it.
    private func check(
        _ response: HTTPResponseHead,
        body: inout any EventStreamChunks,
        connection: any EventStreamBody,
        resumable: Bool
    ) async throws -> SSELoss? {
        let status = Int(response.status.code)
        if status == 204 {
            return SSELoss(
                reason: .streamError(SSEError(.noContent, "the server answered 204 No Content: it asks the client to stop", status: 204)),
                retry: .never)
        }
        guard (200..<300).contains(status) else {
            let answer = await Self.readAnswer(response, body: &body, connection: connection, within: configuration.connectTimeout)
            let error = SSEError(.badStatus, "the server answered HTTP \(status)\(Self.excerpt(answer))", status: status, response: answer)
            let retried = resumable ? status >= 500 || status == 429 : status == 503 || status == 429
            if configuration.retryOnServerErrors, retryPolicy.enabled, retried {
                let after = response.headers.first(name: "Retry-After").flatMap(DelayArithmetic.retryAfter)
                return SSELoss(reason: .streamError(error), retry: after.map { .after($0) } ?? .policy())
            }
            return SSELoss(reason: .streamError(error), retry: .never)
        }
        let contentType = response.headers.first(name: "Content-Type") ?? ""
        let mediaType = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        guard mediaType == "text/event-stream" else {
            let answer = await Self.readAnswer(response, body: &body, connection: connection, within: configuration.connectTimeout)
            let error = SSEError(
                .badContentType,
                "the response is \(contentType.isEmpty ? "untyped" : String(contentType.prefix(100)).debugDescription), not text/event-stream\(Self.excerpt(answer))",
                status: status,
                response: answer
            )
            return SSELoss(reason: .streamError(error), retry: .never)
        }
        return nil
    }

    /// The answer `head` with its body: at most ``SSEErrorResponse/bodyLimit`` bytes, read within
    /// `deadline` (the connection is closed then, and the body kept so far is marked truncated).
    static func readAnswer(
        _ head: HTTPResponseHead,
        body: inout any EventStreamChunks,
        connection: any EventStreamBody,
        within deadline: Duration
    ) async -> SSEErrorResponse {
        var answer = SSEErrorResponse(
            status: Int(head.status.code),
            retryAfter: head.headers.first(name: "Retry-After"),
            contentType: head.headers.first(name: "Content-Type")
        )
        answer.headers = head.headers.map { HTTPHeader(name: $0.name, value: $0.value) }
        let cancelDeadline = connection.close(after: deadline)
        defer { cancelDeadline() }
        do {
            while var chunk = try await body.next() {
                let room = SSEErrorResponse.bodyLimit - answer.body.count
                if chunk.readableBytes > room {
                    answer.body.append(contentsOf: chunk.readBytes(length: room) ?? [])
                    answer.bodyTruncated = true
                    break
                }
                answer.body.append(contentsOf: chunk.readableBytesView)
            }
        } catch {
            answer.bodyTruncated = true
        }
        return answer
    }

    /// The start of an answer's body for a one-line message: `: "…"`, escaped, or nothing.
    static func excerpt(_ answer: SSEErrorResponse) -> String {
        let text = answer.text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !text.isEmpty else { return "" }
        let shown = text.count > 200 ? String(text.prefix(200)) + "…" : text
        return ": " + shown.debugDescription
    }

    private static func describe(_ error: any Error, url: URL) -> SSEError {
        let target = "\(url.host ?? "the server")\(url.port.map { ":\($0)" } ?? "")"
        switch error {
        case let error as SSEError:
            return error
        case let error as WebSocketError:
            // The connector's: the same causes and words as the WebSocket client's.
            let code: SSEError.Code =
                switch error.code {
                case .tlsFailed: .tlsFailed
                case .proxyFailed: .proxyFailed
                case .invalidURL: .invalidURL
                default: .connectionFailed
                }
            return SSEError(code, error.message, status: error.status)
        case let error as ServerSentEventError:
            return SSEError(.eventTooLarge, error.message)
        case let error as HTTPParserError where error == .invalidEOFState:
            return SSEError(
                .connectionFailed, "the connection to \(target) closed before the response ended (a drop, not the server's end of the stream)")
        case let error as HTTPParserError where error == .headerOverflow:
            return SSEError(.connectionFailed, "\(target) answered with headers over the size limit")
        case let error as HTTPParserError:
            return SSEError(.connectionFailed, "\(target) answered with a malformed HTTP response (\(error))")
        case is CancellationError:
            return SSEError(.disconnected, "the attempt was cancelled")
        default:
            return SSEError(.connectionFailed, "the connection to \(target) failed: \(error)")
        }
    }
}
