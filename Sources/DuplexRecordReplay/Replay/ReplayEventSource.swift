import DuplexHost
import DuplexSchema
import NIOConcurrencyHelpers
import NIOCore

/// Replays one recorded SSE session into a stream's writer, from a timer on the connection's event
/// loop: each event at its recorded delay after the one before it (divided by the speed), from
/// the event after the one `Last-Event-ID` names when the recording has it. The stream ends
/// where the server ended it; where the client did, it stays open (with heartbeats).
final class ReplayEventSource: Sendable {
    private let steps: [Cassette.Step]
    private let replay: ReplayConfiguration
    private let writer: EventStreamWriter
    private let eventLoop: any EventLoop
    private let state = NIOLockedValueBox((next: 0, timer: Scheduled<Void>?.none, stopped: false))
    /// When the replay began here, and the recorded time it began at.
    private let began = NIODeadline.now()
    private let base: Duration

    init(session: Cassette.Session, lastEventID: String?, replay: ReplayConfiguration, writer: EventStreamWriter, eventLoop: any EventLoop) {
        self.steps = session.steps
        self.replay = replay
        self.writer = writer
        self.eventLoop = eventLoop
        // After the event the client saw last, when the recording has it.
        let resumed = lastEventID.flatMap { id in
            session.steps.firstIndex { step in
                if case .event(let event) = step.action { return event.id == id }
                return false
            }
        }
        base = resumed.map { session.steps[$0].at } ?? .zero
        state.withLockedValue { $0.next = resumed.map { $0 + 1 } ?? 0 }
        eventLoop.execute { self.fire() }
    }

    /// No more events.
    @Sendable func stop() {
        state.withLockedValue { state in
            state.stopped = true
            state.timer?.cancel()
            state.timer = nil
        }
    }

    /// Gives the writer every step that is due, then waits for the next.
    private func fire() {
        var sent = 0
        while true {
            let next = state.withLockedValue { $0.stopped ? nil : $0.next }
            guard let next, steps.indices.contains(next) else { return }
            let step = steps[next]
            let due = began + TimeAmount(replay.scaled(step.at - base))
            guard due <= .now() else {
                state.withLockedValue { state in
                    guard !state.stopped else { return }
                    state.timer = eventLoop.scheduleTask(deadline: due) { self.fire() }
                }
                return
            }
            // A recording replayed fast sends at the client's pace, with nothing dropped, and a
            // long one yields the event loop to its other connections between batches.
            guard writer.hasRoom else {
                writer.whenDrained { self.fire() }
                return
            }
            guard sent < EventStreamWriter.burst else {
                eventLoop.execute { self.fire() }
                return
            }
            sent += 1
            state.withLockedValue { $0.next = next + 1 }
            switch step.action {
            case .event(let event):
                let text = (try? event.encoded()) ?? ""
                guard writer.send(text) else { return }
            case .disconnect(.server):
                writer.finish()
                return
            case .disconnect(.client), .message, .close, .pongs:
                // The client left here, or a step an SSE session does not have: the stream
                // stays open until the client goes.
                return
            }
        }
    }
}
