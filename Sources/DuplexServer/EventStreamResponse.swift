import DuplexSchema
import HTTPTypes
import Hummingbird
import NIOConcurrencyHelpers
import NIOCore

/// Builds the long-lived `text/event-stream` responses of the SSE routes.
///
/// A stream writes `retry:` first, then what its source yields. When nothing has been written for
/// the heartbeat interval it writes a comment line. It ends when the client goes away, when the
/// server shuts down, or when the client falls more than `outboundQueueLimit` events or
/// `outboundQueueBytes` bytes behind; the client then resumes from its `Last-Event-ID`.
struct EventStreamResponse {
    /// Where a source puts SSE text, ready to write: bounded in count and bytes.
    typealias Sink = OutboundQueue

    let server: DuplexServer

    /// A streaming response whose events come from `source`. The source runs until the stream
    /// ends, and is cancelled then.
    func response(
        info: ConnectionInfo,
        channel: any Channel,
        source: @escaping @Sendable (Sink) async throws -> Void
    ) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/event-stream; charset=utf-8"
        headers[.cacheControl] = "no-cache"
        headers[HTTPField.Name("X-Accel-Buffering")!] = "no"
        let configuration = server.configuration
        let body = ResponseBody { [server] writer in
            try await server.connections.withConnection(info) { commands in
                let sink = OutboundQueue(maxCount: configuration.outboundQueueLimit, maxBytes: configuration.outboundQueueBytes)
                let lastWrite = NIOLockedValueBox(ContinuousClock.now)
                let gate = StallGate()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for await command in commands {
                            switch command {
                            case .stall(let duration):
                                gate.stall(for: duration)
                                continue
                            case .drop:
                                try? await channel.close()
                            case .close:
                                break
                            }
                            break
                        }
                        sink.finish()
                    }
                    group.addTask {
                        try await Self.heartbeat(every: configuration.heartbeatInterval, lastWrite: lastWrite, sink: sink)
                    }
                    group.addTask {
                        try await source(sink)
                    }
                    try await writer.write(ByteBuffer(string: ServerSentEvent.retryDirective(milliseconds: configuration.sseRetryMilliseconds)))
                    for await text in sink.items {
                        await gate.wait()
                        try await writer.write(ByteBuffer(string: text))
                        sink.written(text)
                        lastWrite.withLockedValue { $0 = .now }
                    }
                    group.cancelAll()
                }
                try await writer.finish(nil)
            }
        }
        return Response(status: .ok, headers: headers, body: body)
    }

    /// Queues SSE text; when the queue is full, ends the stream so the client resumes instead.
    static func yield(_ text: String, to sink: Sink) -> Bool {
        if sink.offer(text) { return true }
        sink.finish()
        return false
    }

    private static func heartbeat(
        every interval: Duration,
        lastWrite: NIOLockedValueBox<ContinuousClock.Instant>,
        sink: Sink
    ) async throws {
        while true {
            let due = lastWrite.withLockedValue { $0 }.advanced(by: interval)
            if ContinuousClock.now >= due {
                guard yield(ServerSentEvent.comment("heartbeat"), to: sink) else { return }
                lastWrite.withLockedValue { $0 = .now }
            } else {
                try await Task.sleep(until: due, clock: .continuous)
            }
        }
    }
}

/// Suspends until the task is cancelled.
func waitUntilCancelled() async {
    let (stream, continuation) = AsyncStream<Never>.makeStream()
    await withTaskCancellationHandler {
        for await _ in stream {}
    } onCancel: {
        continuation.finish()
    }
}

/// Holds a connection's writers back while it is stalled.
final class StallGate: Sendable {
    private let until = NIOLockedValueBox<ContinuousClock.Instant?>(nil)

    /// Stalls for `duration` from now.
    func stall(for duration: Duration) {
        until.withLockedValue { $0 = .now + duration }
    }

    /// Returns once the stall, if any, is over.
    func wait() async {
        while let end = until.withLockedValue({ $0 }), end > .now {
            try? await Task.sleep(until: end, clock: .continuous)
        }
    }
}
