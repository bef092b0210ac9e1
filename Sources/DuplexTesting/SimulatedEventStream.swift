import DequeModule
import Duplex
import DuplexHost
import DuplexSchema
import DuplexScripted
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// A `ServerSentEventManager`'s requests on a ``SimulatedNetwork``: each crosses the link to the
/// server its URL names, which answers with its event stream (or the answer it was given for
/// streams), refuses it (down, or no server there), or leaves it unanswered (a partition) until
/// the configuration's connect timeout.
struct SimulatedEventStreamTransport: EventStreamTransport {
    let network: SimulatedNetwork
    /// The client's number in the log (`c1`).
    let client: Int

    func open(
        endpoint: WebSocketRequest.Endpoint,
        method: HTTPMethod,
        headers: HTTPHeaders,
        body: Data?,
        configuration: SSEConfiguration
    ) async throws -> EventStreamResponse {
        let number = network.nextConnection()
        let stream = SimulatedEventStream(network: network, label: "c\(client)#\(number)", number: number, readTimeout: configuration.readTimeout)
        let lastEventID = headers.first(name: "Last-Event-ID")
        network.record("\(stream.label) \(method.rawValue) \(endpoint.target)\(lastEventID.map { " Last-Event-ID \($0)" } ?? "")")
        let (network, clock) = (network, network.clock)
        let server = network.server(atHost: endpoint.host, port: endpoint.port)
        let attempt = Attempt<HTTPResponseHead>()
        let head = try await attempt.run {
            let timeout = clock.schedule(at: clock.now.advanced(by: configuration.connectTimeout)) {
                if attempt.isPending { network.record("\(stream.label) connect timed out") }
                attempt.finish(.failure(WebSocketError(.connectTimeout, "no answer within \(configuration.connectTimeout) (simulated)")))
            }
            let target = endpoint.target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
            let request = ScriptedRequest(
                method: method.rawValue,
                path: target.first.map(String.init) ?? "/",
                query: target.count > 1 ? String(target[1]) : nil,
                headers: headers.map { ($0.name, $0.value) },
                body: body.map { Array($0) }
            )
            stream.send(upstream: true, bytes: 300 + (body?.count ?? 0)) {
                let answer = server?.answer(stream, request: request)
                stream.send(upstream: false, bytes: 200) {
                    clock.cancel(timeout)
                    guard attempt.isPending else {
                        // Timed out or cancelled meanwhile: the client has gone.
                        stream.closeNow()
                        return
                    }
                    guard let answer else {
                        network.record("\(stream.label) refused")
                        let place = "\(server == nil ? "no server at" : "server down at") \(endpoint.host)"
                        attempt.finish(.failure(WebSocketError(.connectionFailed, "connection refused (simulated: \(place))")))
                        return
                    }
                    network.record("\(stream.label) HTTP \(answer.status)")
                    var headers = HTTPHeaders(answer.headers.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
                    if answer.status == 200, headers["Content-Type"].isEmpty { headers.add(name: "Content-Type", value: "text/event-stream") }
                    attempt.finish(.success(HTTPResponseHead(version: .http1_1, status: .init(statusCode: answer.status), headers: headers)))
                }
                // What the server sends at once follows the head, in order.
                guard let answer else { return }
                stream.opened(server: server)
                for (text, line) in answer.chunks { stream.serverSends(text, line) }
                if answer.ends { stream.serverEnded() }
                if let scripted = answer.scripted { stream.start(scripted, server: server) }
            }
        }
        return EventStreamResponse(head: head, body: stream)
    }
}

/// One simulated event-stream response, both of its ends: the body the client reads and what
/// its server sees.
final class SimulatedEventStream: EventStreamBody {
    let label: String
    let number: Int
    private let network: SimulatedNetwork
    private let readTimeout: Duration

    private let path: SimulatedPath
    /// The scripted route's feed, when one serves it.
    private let feed = NIOLockedValueBox<ScriptedEventSource?>(nil)

    private struct State {
        var chunks = Deque<ByteBuffer>()
        /// How the body ended, when it has: cleanly (nil) or with an error.
        var end: (any Error)??
        /// The read under way, and its number (for its read timeout).
        var reader: CheckedContinuation<ByteBuffer?, any Error>?
        var reads: UInt64 = 0
        var readTimer: UInt64?
    }

    private let state = NIOLockedValueBox(State())

    init(network: SimulatedNetwork, label: String, number: Int, readTimeout: Duration) {
        self.network = network
        self.path = SimulatedPath(network: network)
        self.label = label
        self.number = number
        self.readTimeout = readTimeout
    }

    func opened(server: SimulatedServer?) {
        path.opened(server: server)
    }

    // MARK: The client's end

    func readThenClose(_ read: (inout any EventStreamChunks) async throws -> Void) async throws {
        var chunks: any EventStreamChunks = Chunks(stream: self)
        do {
            try await read(&chunks)
        } catch {
            closeNow()
            throw error
        }
        closeNow()
    }

    func close() async {
        closeNow()
    }

    func close(after delay: Duration) -> @Sendable () -> Void {
        let clock = network.clock
        let timer = clock.schedule(at: clock.now.advanced(by: delay)) { [self] in closeNow() }
        return { clock.cancel(timer) }
    }

    private struct Chunks: EventStreamChunks {
        let stream: SimulatedEventStream
        mutating func next() async throws -> ByteBuffer? {
            try await stream.nextChunk()
        }
    }

    /// The next chunk that arrived, waiting for one (for up to the read timeout) when none has.
    private func nextChunk() async throws -> ByteBuffer? {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ByteBuffer?, any Error>) in
                let (ready, read) = state.withLockedValue { state -> (Result<ByteBuffer?, any Error>?, UInt64?) in
                    if let chunk = state.chunks.popFirst() { return (.success(chunk), nil) }
                    if let end = state.end { return (end.map { .failure($0) } ?? .success(nil), nil) }
                    if !path.reachesClient { return (.success(nil), nil) }
                    if Task.isCancelled { return (.failure(CancellationError()), nil) }
                    state.reader = continuation
                    state.reads += 1
                    return (nil, state.reads)
                }
                if let ready { return continuation.resume(with: ready) }
                guard let read else { return }
                // Only while a read is wanted, as the network's transport times it.
                let clock = network.clock
                let timer = clock.schedule(at: clock.now.advanced(by: readTimeout)) { [self] in readTimedOut(read) }
                let stale = state.withLockedValue { state -> Bool in
                    guard state.reader != nil, state.reads == read else { return true }
                    state.readTimer = timer
                    return false
                }
                if stale { clock.cancel(timer) }
            }
        } onCancel: {
            resumeReader(with: .failure(CancellationError()))
        }
    }

    private func readTimedOut(_ read: UInt64) {
        let current = state.withLockedValue { $0.reader != nil && $0.reads == read }
        guard current else { return }
        network.record("\(label) read timed out")
        resumeReader(with: .failure(SSEError(.readTimeout, "no bytes arrived within the read timeout (\(readTimeout), simulated)")))
        closeNow()
    }

    /// Ends the read under way, if any, with `result`.
    private func resumeReader(with result: Result<ByteBuffer?, any Error>) {
        let (reader, timer) = state.withLockedValue { state in
            defer {
                state.reader = nil
                state.readTimer = nil
            }
            return (state.reader, state.readTimer)
        }
        if let timer { network.clock.cancel(timer) }
        reader?.resume(with: result)
    }

    /// Closes the client's end: a read under way ends, and the server forgets it a link's delay
    /// later.
    func closeNow() {
        guard path.closeForClient() else { return }
        network.record("\(label) closed by client")
        resumeReader(with: .success(nil))
        send(upstream: true, bytes: 0) { [self] in
            guard let server = liveServer() else { return }
            server.forget(self)
            path.closeForServer()
            stopFeed()
        }
    }

    // MARK: The server's end

    /// The server sends `text`, logged as `line`.
    func serverSends(_ text: String, _ line: String) {
        send(upstream: false, bytes: text.utf8.count) { [self] in
            guard toClient() else { return }
            network.record("\(label) ← \(line)")
            arrived(.success(ByteBuffer(string: text)))
        }
    }

    /// The server ends the response: the client reads its end.
    func serverEnded() {
        path.closeForServer()
        stopFeed()
        send(upstream: false, bytes: 5) { [self] in
            guard toClient() else { return }
            network.record("\(label) response ended")
            arrived(.success(nil))
        }
    }

    /// The server went down: the connection drops before the response's end.
    func serverDropped() {
        path.closeForServer()
        stopFeed()
        send(upstream: false, bytes: 0) { [self] in
            guard toClient() else { return }
            network.record("\(label) dropped")
            arrived(
                .failure(
                    SSEError(
                        .connectionFailed,
                        "the connection closed before the response ended (a drop, not the server's end of the stream; simulated)")))
        }
    }

    /// Its path is gone: from now on nothing sent either way arrives, and neither end is told.
    func blackhole() {
        path.blackhole()
    }

    // MARK: A scripted route's stream

    /// Sets a scripted route's stream going, on the network's loop: what its writer hands on
    /// crosses the link, and its end ends the response (or drops it, as the script says).
    func start(_ scripted: ScriptedStream, server: SimulatedServer?) {
        let loop = network.eventLoop
        let output = ScriptedStreamOutput(stream: self, server: server)
        let writer = EventStreamWriter(output: output, eventLoop: loop, maxCount: 1_024, maxBytes: 1 << 20)
        let source = scripted.start(writer: writer, eventLoop: loop)
        output.source = source
        feed.withLockedValue { $0 = source }
        network.track { [weak self] in self?.stopFeed() }
    }

    /// The stream ended: the route's feed stops (it journals a client that left).
    private func stopFeed() {
        let source = feed.withLockedValue { feed in
            defer { feed = nil }
            return feed
        }
        source?.stop()
    }

    // MARK: Helpers

    /// A chunk (or the end: nil) arrived for the client.
    private func arrived(_ result: Result<ByteBuffer?, any Error>) {
        let reader = state.withLockedValue { state -> CheckedContinuation<ByteBuffer?, any Error>? in
            if let reader = state.reader {
                if case .success(nil) = result { state.end = .some(nil) }
                if case .failure(let error) = result { state.end = .some(error) }
                return reader
            }
            switch result {
            case .success(let chunk?): state.chunks.append(chunk)
            case .success(nil): state.end = .some(nil)
            case .failure(let error): state.end = .some(error)
            }
            return nil
        }
        if reader != nil { resumeReader(with: result) }
    }

    /// Sends `bytes` one way; `delivery` runs when they arrive, unless the path is gone.
    func send(upstream: Bool, bytes: Int, _ delivery: @escaping @Sendable () -> Void) {
        path.send(upstream: upstream, bytes: bytes, delivery)
    }

    private func liveServer() -> SimulatedServer? {
        path.liveServer
    }

    private func toClient() -> Bool {
        path.reachesClient
    }
}

/// Where a scripted route's stream writer hands its chunks on a simulated network: to the
/// stream's way to the client. Called on the network's loop.
private final class ScriptedStreamOutput: EventStreamOutput, @unchecked Sendable {
    private let stream: SimulatedEventStream
    private weak var server: SimulatedServer?
    /// The feed, to ask at the end whether its script dropped the stream.
    var source: ScriptedEventSource?

    init(stream: SimulatedEventStream, server: SimulatedServer?) {
        self.stream = stream
        self.server = server
    }

    /// The link takes everything: what a slow reader leaves unread waits at its end.
    var isWritable: Bool { true }

    func write(_ chunks: [ByteBuffer]) {
        for chunk in chunks { stream.serverSends(String(buffer: chunk), "\(chunk.readableBytes) bytes") }
    }

    func writerFinished(overflowed: Bool) {
        server?.forget(stream)
        if overflowed || source?.drops == true { stream.serverDropped() } else { stream.serverEnded() }
        source = nil
    }
}
