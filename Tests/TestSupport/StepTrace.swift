package import Duplex
import DuplexTesting
import NIOConcurrencyHelpers
import Testing

/// A long test's progress, for its failure message: the step it waited on last and what the
/// client reported meanwhile, so that a timeout on a loaded CI machine says where it stopped.
package final class StepTrace: Sendable {
    private let state = NIOLockedValueBox((step: "", seen: [String]()))

    /// The step entered last.
    package var step: String { state.withLockedValue { $0.step } }
    /// The steps and the events seen, in order.
    package var seen: [String] { state.withLockedValue { $0.seen } }

    package func enter(_ step: String) {
        state.withLockedValue {
            $0.step = step; $0.seen.append("[\(step)]")
        }
    }

    package func saw(_ value: some Sendable) {
        state.withLockedValue { $0.seen.append(String(describing: value)) }
    }

    /// Runs `body` with a fresh trace; an error it throws is recorded as an issue that names the
    /// step and what the client saw.
    package static func run(_ body: (StepTrace) async throws -> Void) async {
        let trace = StepTrace()
        do {
            try await body(trace)
        } catch {
            Issue.record("failed at step \"\(trace.step)\" (\(error)); client saw: \(trace.seen.joined(separator: ", "))")
        }
    }

    /// Sends `text` once, as an application would, and waits within `limit` for it to come
    /// back, noting every event meanwhile. One iteration of `events` throughout: a cancelled
    /// iteration would end the stream.
    package func echo(_ text: String, on socket: WebSocket, _ events: AsyncStream<WebSocketEvent>, within limit: Duration = .seconds(20)) async throws
    {
        try await withTimeout(limit) {
            try await socket.send(text)
            for await event in events {
                self.saw(event)
                if event == .message(.string(text)) { return }
            }
            throw StreamEndedError()
        }
    }
}
