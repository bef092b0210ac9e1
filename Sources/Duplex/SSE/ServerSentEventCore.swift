import AsyncHTTPClient
import DuplexSchema
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSOCKS
import NIOSSL

/// The engine behind a ``ServerSentEventManager``: runs ``ConnectionLifecycle`` with
/// ``SSEPolicy`` and performs its actions, as ``WebSocketCore`` does for a socket. Each attempt
/// is a task that sends the request, reports the opening, and reads the body into ``events``
/// until the stream ends; the lifecycle decides what follows.
final class ServerSentEventCore: LifecycleRunner {
    let request: SSERequest
    let retryPolicy: RetryPolicy
    let configuration: SSEConfiguration
    let clock: any Clock<Duration>
    let events: Broadcaster<ServerSentEvent>
    let states: Broadcaster<SSEState>
    /// Closed while a lossless consumer of ``events`` is behind: the body is read no further.
    let gate = DemandGate()
    private let client: Result<HTTPClient, SSEError>
    /// `host:port` of the proxy the stream goes through, if any.
    private let proxyAddress: String?

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
        var state = State(lifecycle: ConnectionLifecycle(policy: SSEPolicy(strategy: retryPolicy)))
        state.lastEventID = lastEventID
        self.box = NIOLockedValueBox(state)
        do {
            var httpConfiguration = HTTPClient.Configuration(
                tlsConfiguration: try configuration.tlsTrust.sseClientConfiguration(identity: configuration.tlsIdentity),
                redirectConfiguration: .follow(max: 5, allowCycles: false),
                timeout: .init(connect: TimeAmount(configuration.connectTimeout), read: TimeAmount(configuration.readTimeout))
            )
            httpConfiguration.httpVersion = .http1Only
            httpConfiguration.proxy = try Self.proxy(configuration.proxy, for: request.url)
            proxyAddress = httpConfiguration.proxy.map { "\($0.host):\($0.port)" }
            self.client = .success(HTTPClient(eventLoopGroupProvider: .singleton, configuration: httpConfiguration))
        } catch let error as WebSocketError where error.code == .invalidURL {
            proxyAddress = nil
            self.client = .failure(SSEError(.invalidURL, error.message))
        } catch {
            proxyAddress = nil
            self.client = .failure(SSEError(.tlsFailed, (error as? WebSocketError)?.message ?? "\(error)"))
        }
    }

    deinit {
        if case .success(let client) = client {
            // Ends when the client has shut down: nothing else holds it.
            Task { try? await client.shutdown() }
        }
    }

    var state: SSEState { box.locked { $0.state } }
    var lastEventID: String? { box.locked { $0.lastEventID.isEmpty ? nil : $0.lastEventID } }
    var serverRetry: Duration? { box.locked { $0.serverRetryMilliseconds.map { .milliseconds($0) } } }

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
            state.attempt = (generation, Task { await self.attempt(generation: generation) })
        case .cancelAttempt, .closeConnection, .abortConnection:
            state.attempt?.task.cancel()
        case .discardConnection, .flush, .deliverHeld, .startPinging, .stopPinging, .opened, .lost, .closedAsAsked, .dropQueued:
            // The attempt stops itself when its opening is discarded; an event stream has no
            // pings, no held events (nothing is read before the opening) and sends nothing.
            break
        case .attemptFailed(let loss, let willRetry):
            if !willRetry, loss.retry == .never {
                configuration.logger.warning("SSE stream failed for good", metadata: ["reason": "\(loss.reason)"])
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
            // The server's `retry:` is its wish for the delay of every reconnection.
            if loss.retry == .policy(suggested: nil), let wish = state.serverRetryMilliseconds {
                loss.retry = .policy(suggested: .milliseconds(wish))
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
        box.locked { state in
            guard state.lifecycle.received(generation: generation) == .deliver else { return }
            for event in parsed { events.yield(event) }
            if !parsed.isEmpty { state.lifecycle.proved(generation: generation) }
            state.lastEventID = parser.lastEventID
            state.serverRetryMilliseconds = parser.reconnectionTime ?? state.serverRetryMilliseconds
        }
    }

    // MARK: An attempt

    private func attempt(generation: UInt64) async {
        let client: HTTPClient
        switch self.client {
        case .success(let made): client = made
        case .failure(let error):
            ended(generation: generation, opened: false, loss: SSELoss(reason: .streamError(error), retry: .never))
            return
        }
        var current = request
        if let prepare = box.locked({ $0.prepareRequest }) { current = await prepare(current) }
        let lastEventID = box.locked { $0.lastEventID }
        var parser = ServerSentEventParser(lastEventID: lastEventID, configuration: .init(maxEventBytes: configuration.maxEventBytes))
        var httpRequest = HTTPClientRequest(url: current.url.absoluteString)
        httpRequest.method = .GET
        for (name, value) in current.additionalHeaders.sorted(by: { $0.key < $1.key }) {
            httpRequest.headers.replaceOrAdd(name: name, value: value)
        }
        httpRequest.headers.replaceOrAdd(name: "Accept", value: "text/event-stream")
        httpRequest.headers.replaceOrAdd(name: "Cache-Control", value: "no-cache")
        if !lastEventID.isEmpty {
            httpRequest.headers.replaceOrAdd(name: "Last-Event-ID", value: lastEventID)
        }
        var isOpen = false
        do {
            let response = try await client.execute(httpRequest, timeout: TimeAmount(configuration.connectTimeout), logger: configuration.logger)
            if let failure = check(response) {
                ended(generation: generation, opened: false, loss: failure)
                return
            }
            guard opened(generation: generation) else { return }
            isOpen = true
            for try await chunk in response.body {
                let parsed = try parser.parse(chunk.readableBytesView)
                received(parsed, parser: parser, generation: generation)
                // A reader behind: read no more of the body (AsyncHTTPClient then stops reading
                // the socket) until it catches up.
                await gate.waitUntilOpen()
            }
            parser.finish()
            ended(generation: generation, opened: true, loss: SSELoss(reason: .streamEnded, retry: .policy()))
        } catch {
            parser.finish()
            let described = Self.describe(error, url: current.url, proxy: proxyAddress)
            ended(generation: generation, opened: isOpen, loss: SSELoss(reason: .streamError(described), retry: [.tlsFailed, .proxyFailed].contains(described.code) ? .never : .policy()))
        }
    }

    /// A failure for a response that cannot be read as an event stream, or nil.
    private func check(_ response: HTTPClientResponse) -> SSELoss? {
        let status = Int(response.status.code)
        if status == 204 {
            return SSELoss(reason: .streamError(SSEError(.noContent, "the server answered 204 No Content: it asks the client to stop", status: 204)), retry: .never)
        }
        guard (200..<300).contains(status) else {
            let error = SSEError(.badStatus, "the server answered HTTP \(status)", status: status)
            if configuration.retryOnServerErrors, retryPolicy.enabled, status >= 500 || status == 429 {
                let after = response.headers.first(name: "Retry-After").flatMap(Self.retryAfter)
                return SSELoss(reason: .streamError(error), retry: after.map { .after($0) } ?? .policy())
            }
            return SSELoss(reason: .streamError(error), retry: .never)
        }
        let contentType = response.headers.first(name: "Content-Type") ?? ""
        let mediaType = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        guard mediaType == "text/event-stream" else {
            let error = SSEError(.badContentType, "the response is \(contentType.isEmpty ? "untyped" : contentType), not text/event-stream")
            return SSELoss(reason: .streamError(error), retry: .never)
        }
        return nil
    }

    /// `Retry-After` as seconds or an HTTP date.
    static func retryAfter(_ value: String) -> Duration? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if !trimmed.isEmpty, trimmed.utf8.allSatisfy({ (0x30...0x39).contains($0) }) {
            // Digits only: seconds, however many (a huge value is clamped by the policy).
            return DelayArithmetic.duration(seconds: Double(trimmed) ?? DelayArithmetic.longestSeconds)
        }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return DelayArithmetic.duration(seconds: date.timeIntervalSinceNow)
    }

    /// AsyncHTTPClient's proxy for the route ``SSEConfiguration/proxy`` gives `url`.
    /// - Throws: ``WebSocketError`` with code ``WebSocketError/Code/invalidURL`` for a malformed
    ///   proxy variable in the environment.
    private static func proxy(_ proxy: Proxy?, for url: URL) throws -> HTTPClient.Configuration.Proxy? {
        let route = try proxy?.route(secure: url.scheme?.lowercased() == "https", host: url.host ?? "")
        switch route {
        case .http(let host, let port, let username, let password)?:
            return .server(host: host, port: port, authorization: username.map { .basic(username: $0, password: password ?? "") })
        case .socks5(let host, let port)?:
            return .socksServer(host: host, port: port)
        case nil:
            return nil
        }
    }

    private static func describe(_ error: any Error, url: URL, proxy: String?) -> SSEError {
        let target = "\(url.host ?? "the server")\(url.port.map { ":\($0)" } ?? "")"
        switch error {
        case let error as SSEError: return error
        case is NIOConnectionError where proxy != nil:
            return SSEError(.proxyFailed, "could not connect to the proxy \(proxy ?? ""): \(SystemErrorText.describe(error))")
        case let error as SOCKSError.ConnectionFailed:
            return SSEError(.proxyFailed, "the SOCKS5 proxy did not open a tunnel to \(target): \(ProxyTunnel.socksReply(error.reply))")
        case is SOCKSError.NoValidAuthenticationMethod:
            return SSEError(.proxyFailed, "the SOCKS5 proxy requires authentication, which is not supported")
        case let error as HTTPClientError where error == .proxyAuthenticationRequired:
            return SSEError(.proxyFailed, "the proxy requires authentication, or refused the user and password (HTTP 407)")
        case let error as HTTPClientError where error == .invalidProxyResponse:
            return SSEError(.proxyFailed, "the proxy refused the tunnel to \(target), or could not reach it")
        case let error as HTTPClientError where error == .httpProxyHandshakeTimeout || error == .socksHandshakeTimeout:
            return SSEError(.proxyFailed, "the proxy did not open a tunnel to \(target) in time")
        case let error as ServerSentEventError: return SSEError(.eventTooLarge, error.message)
        case let error as HTTPClientError where error == .readTimeout:
            return SSEError(.readTimeout, "no bytes arrived within the read timeout")
        case let error as HTTPClientError where error == .connectTimeout || error == .deadlineExceeded:
            return SSEError(.connectionFailed, "the connection timed out")
        case _ where TLSDiagnosis.cause(of: error, peer: nil) != nil:
            return SSEError(.tlsFailed, "TLS with \(target) failed: \(TLSDiagnosis.cause(of: error, peer: nil) ?? "")")
        case is IOError, is NIOConnectionError:
            return SSEError(.connectionFailed, "could not connect to \(target): \(SystemErrorText.describe(error))")
        default:
            return SSEError(.connectionFailed, "the connection to \(target) failed: \(error)")
        }
    }
}
