import AsyncHTTPClient
import DuplexSchema
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// The engine behind a ``ServerSentEventManager``: one task per connected session runs
/// connect, read and wait-to-retry in a loop, and the lock-protected state says what the
/// public API sees.
final class ServerSentEventCore: Sendable {
    let request: SSERequest
    let retryPolicy: RetryPolicy
    let configuration: SSEConfiguration
    private let clock: any Clock<Duration>
    let events: Broadcaster<ServerSentEvent>
    let states: Broadcaster<SSEState>
    /// Closed while a lossless consumer of ``events`` is behind: the body is read no further.
    let gate = DemandGate()
    private let client: Result<HTTPClient, SSEError>

    private struct State {
        var state: SSEState = .notConnected
        var lastEventID = ""
        var serverRetryMilliseconds: Int?
        var run: Task<Void, Never>?
        var runID: UInt64 = 0
        var connectWaiters: [CheckedContinuation<Void, any Error>] = []
        var terminated = false
        var prepareRequest: (@Sendable (SSERequest) async -> SSERequest)?
    }

    private let box = NIOLockedValueBox(State())

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
        box.withLockedValue { $0.lastEventID = lastEventID }
        do {
            var httpConfiguration = HTTPClient.Configuration(
                tlsConfiguration: try configuration.tlsTrust.clientConfiguration(),
                redirectConfiguration: .follow(max: 5, allowCycles: false),
                timeout: .init(connect: TimeAmount(configuration.connectTimeout), read: TimeAmount(configuration.readTimeout))
            )
            httpConfiguration.httpVersion = .http1Only
            self.client = .success(HTTPClient(eventLoopGroupProvider: .singleton, configuration: httpConfiguration))
        } catch {
            self.client = .failure(SSEError(.tlsFailed, (error as? WebSocketError)?.message ?? "\(error)"))
        }
    }

    deinit {
        if case .success(let client) = client {
            Task { try? await client.shutdown() }
        }
    }

    var state: SSEState { box.withLockedValue { $0.state } }
    var lastEventID: String? { box.withLockedValue { $0.lastEventID.isEmpty ? nil : $0.lastEventID } }
    var serverRetry: Duration? { box.withLockedValue { $0.serverRetryMilliseconds.map { .milliseconds($0) } } }

    var prepareRequest: (@Sendable (SSERequest) async -> SSERequest)? {
        get { box.withLockedValue { $0.prepareRequest } }
        set { box.withLockedValue { $0.prepareRequest = newValue } }
    }

    func makeStateStream() -> AsyncStream<SSEState> {
        box.withLockedValue { states.makeStream(startingWith: $0.state) }
    }

    // MARK: Requests

    func connect() async throws {
        try request.validate()
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            box.withLockedValue { state in
                if state.terminated {
                    continuation.resume(throwing: SSEError(.terminated, "terminate() was called"))
                    return
                }
                if state.state == .connected {
                    continuation.resume()
                    return
                }
                state.connectWaiters.append(continuation)
                guard state.run == nil else { return }
                state.runID += 1
                let runID = state.runID
                state.run = Task { await self.run(runID: runID) }
            }
        }
    }

    func disconnect() async {
        let run = box.withLockedValue { state -> Task<Void, Never>? in
            guard let run = state.run, !state.terminated else { return nil }
            state.run = nil
            state.runID += 1
            resumeWaiters(&state, with: SSEError(.disconnected, "disconnect() was called"))
            set(.disconnected(.manuallyDisconnected), in: &state)
            return run
        }
        run?.cancel()
        await run?.value
    }

    func terminate() {
        box.withLockedValue { state in
            guard !state.terminated else { return }
            state.terminated = true
            state.run?.cancel()
            state.runID += 1
            resumeWaiters(&state, with: SSEError(.terminated, "terminate() was called"))
            set(.disconnected(.terminated), in: &state)
        }
        events.finish()
        states.finish()
    }

    func waitForRunToEnd() async {
        let run = box.withLockedValue { state -> Task<Void, Never>? in
            defer { state.run = nil }
            return state.run
        }
        await run?.value
    }

    // MARK: The loop

    fileprivate enum Outcome {
        case cancelled
        case ended(delivered: Bool)
        case failed(SSEError, delivered: Bool, retry: Retry)
    }

    /// Whether, and when, a failure is retried.
    fileprivate enum Retry {
        /// Never: the server's answer is final.
        case never
        /// After the policy's delay.
        case policy
        /// After the server's `Retry-After`.
        case after(Duration)
    }

    private func run(runID: UInt64) async {
        let client: HTTPClient
        switch self.client {
        case .success(let made): client = made
        case .failure(let error):
            finish(runID: runID, reason: .streamError(error), error: error)
            return
        }
        var parser = ServerSentEventParser(
            lastEventID: box.withLockedValue { $0.lastEventID },
            configuration: .init(maxEventBytes: configuration.maxEventBytes)
        )
        var schedule = ReconnectionSchedule(strategy: retryPolicy)
        while !Task.isCancelled {
            guard publish(.connecting, runID: runID) else { return }
            let outcome = await attemptOnce(client: client, parser: &parser, runID: runID)
            let reason: SSEDisconnectReason
            var retryAfter: Duration?
            switch outcome {
            case .cancelled:
                return
            case .ended(let delivered):
                reason = .streamEnded
                if delivered { schedule.connectionProved() }
            case .failed(let error, let delivered, let retry):
                if delivered { schedule.connectionProved() }
                switch retry {
                case .never:
                    configuration.logger.warning("SSE stream failed for good", metadata: ["error": "\(error)"])
                    finish(runID: runID, reason: .streamError(error), error: error)
                    return
                case .policy:
                    break
                case .after(let delay):
                    retryAfter = delay
                }
                reason = .streamError(error)
            }
            let suggested = parser.reconnectionTime.map { Duration.milliseconds($0) }
            guard let (attempt, delay) = schedule.nextAttempt(suggested: suggested, overriding: retryAfter) else {
                let exhausted = SSEError(.retriesExhausted, retryPolicy.enabled ? "gave up after \(schedule.attempts) reconnection attempts" : "retries are disabled")
                finish(runID: runID, reason: reason, error: exhausted)
                return
            }
            guard publish(.disconnected(reason), runID: runID) else { return }
            configuration.logger.info("SSE reconnecting", metadata: ["attempt": "\(attempt + 1)", "delay": "\(delay)", "reason": "\(reason)"])
            do {
                try await clock.sleep(for: delay)
            } catch {
                return
            }
        }
    }

    private func attemptOnce(client: HTTPClient, parser: inout ServerSentEventParser, runID: UInt64) async -> Outcome {
        var current = request
        if let prepare = box.withLockedValue({ $0.prepareRequest }) { current = await prepare(current) }
        var httpRequest = HTTPClientRequest(url: current.url.absoluteString)
        httpRequest.method = .GET
        for (name, value) in current.additionalHeaders.sorted(by: { $0.key < $1.key }) {
            httpRequest.headers.replaceOrAdd(name: name, value: value)
        }
        httpRequest.headers.replaceOrAdd(name: "Accept", value: "text/event-stream")
        httpRequest.headers.replaceOrAdd(name: "Cache-Control", value: "no-cache")
        if !parser.lastEventID.isEmpty {
            httpRequest.headers.replaceOrAdd(name: "Last-Event-ID", value: parser.lastEventID)
        }
        var delivered = false
        do {
            let response = try await client.execute(httpRequest, timeout: TimeAmount(configuration.connectTimeout), logger: configuration.logger)
            if let failure = check(response) {
                return failure
            }
            guard publish(.connected, runID: runID) else { return .cancelled }
            for try await chunk in response.body {
                let parsed = try parser.parse(chunk.readableBytesView)
                for event in parsed { events.yield(event) }
                if !parsed.isEmpty { delivered = true }
                let (id, retry) = (parser.lastEventID, parser.reconnectionTime)
                box.withLockedValue { state in
                    state.lastEventID = id
                    state.serverRetryMilliseconds = retry
                }
                // A reader behind: read no more of the body (AsyncHTTPClient then stops reading
                // the socket) until it catches up.
                await gate.waitUntilOpen()
            }
            parser.finish()
            return Task.isCancelled ? .cancelled : .ended(delivered: delivered)
        } catch {
            parser.finish()
            if Task.isCancelled { return .cancelled }
            let described = Self.describe(error, url: current.url)
            return .failed(described, delivered: delivered, retry: described.code == .tlsFailed ? .never : .policy)
        }
    }

    /// A failure for a response that cannot be read as an event stream, or nil.
    private func check(_ response: HTTPClientResponse) -> Outcome? {
        let status = Int(response.status.code)
        if status == 204 {
            return .failed(SSEError(.noContent, "the server answered 204 No Content: it asks the client to stop", status: 204), delivered: false, retry: .never)
        }
        guard (200..<300).contains(status) else {
            let error = SSEError(.badStatus, "the server answered HTTP \(status)", status: status)
            if configuration.retryOnServerErrors, retryPolicy.enabled, status >= 500 || status == 429 {
                let after = response.headers.first(name: "Retry-After").flatMap(Self.retryAfter)
                return .failed(error, delivered: false, retry: after.map { .after($0) } ?? .policy)
            }
            return .failed(error, delivered: false, retry: .never)
        }
        let contentType = response.headers.first(name: "Content-Type") ?? ""
        let mediaType = contentType.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces).lowercased() } ?? ""
        guard mediaType == "text/event-stream" else {
            return .failed(SSEError(.badContentType, "the response is \(contentType.isEmpty ? "untyped" : contentType), not text/event-stream"), delivered: false, retry: .never)
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

    private static func describe(_ error: any Error, url: URL) -> SSEError {
        let target = "\(url.host ?? "the server")\(url.port.map { ":\($0)" } ?? "")"
        switch error {
        case let error as SSEError: return error
        case let error as ServerSentEventError: return SSEError(.eventTooLarge, error.message)
        case let error as HTTPClientError where error == .readTimeout:
            return SSEError(.readTimeout, "no bytes arrived within the read timeout")
        case let error as HTTPClientError where error == .connectTimeout || error == .deadlineExceeded:
            return SSEError(.connectionFailed, "the connection timed out")
        case is NIOSSLError, is BoringSSLError:
            return SSEError(.tlsFailed, "TLS failed: \(error)")
        case is IOError, is NIOConnectionError:
            return SSEError(.connectionFailed, "could not connect to \(target): \(SystemErrorText.describe(error))")
        default:
            return SSEError(.connectionFailed, "the connection to \(target) failed: \(error)")
        }
    }

    // MARK: State

    /// Publishes a state for the current run; false when the run is no longer current.
    private func publish(_ newState: SSEState, runID: UInt64) -> Bool {
        box.withLockedValue { state in
            guard state.runID == runID, !state.terminated else { return false }
            set(newState, in: &state)
            if newState == .connected { resumeWaiters(&state, with: nil) }
            return true
        }
    }

    /// Ends the run for good with `reason`; waiting `connect()` calls throw `error`.
    private func finish(runID: UInt64, reason: SSEDisconnectReason, error: SSEError) {
        box.withLockedValue { state in
            guard state.runID == runID, !state.terminated else { return }
            state.run = nil
            set(.disconnected(reason), in: &state)
            resumeWaiters(&state, with: error)
        }
    }

    private func set(_ newState: SSEState, in state: inout State) {
        guard state.state != newState else { return }
        state.state = newState
        states.yield(newState)
    }

    private func resumeWaiters(_ state: inout State, with error: SSEError?) {
        for waiter in state.connectWaiters {
            if let error { waiter.resume(throwing: error) } else { waiter.resume() }
        }
        state.connectWaiters = []
    }
}
