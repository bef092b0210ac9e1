import DuplexHost
import DuplexSchema
import NIOConcurrencyHelpers
import NIOCore

/// A scripted SSE route's handlers.
struct SSERouteHandler: Sendable {
    var accept: @Sendable (ScriptedRequest) -> UpgradeDecision
    var respond: @Sendable (ScriptedRequest) -> SSEScript
}

/// Feeds one scripted SSE stream: its events, one every ``SSEScript/every``, from timers on the
/// connection's event loop (no task), then its ending; everything journaled.
package final class ScriptedEventSource: Sendable {
    private let script: SSEScript
    private let events: [SSEScriptEvent]
    private let writer: EventStreamWriter
    private let eventLoop: any EventLoop
    private let record: @Sendable (ScriptJournal.Entry.Kind, ScriptJournal.Entry.Direction, SSEScriptEvent?) -> Void
    private let state = NIOLockedValueBox(State())

    private struct State {
        var next = 0
        var timer: Scheduled<Void>?
        var stopped = false
        /// How the script ended the stream, once it did.
        var ended: SSEEnding?
    }

    init(
        script: SSEScript,
        lastEventID: String?,
        writer: EventStreamWriter,
        eventLoop: any EventLoop,
        record: @escaping @Sendable (ScriptJournal.Entry.Kind, ScriptJournal.Entry.Direction, SSEScriptEvent?) -> Void
    ) {
        self.script = script
        self.events = Array(script.events(after: lastEventID))
        self.writer = writer
        self.eventLoop = eventLoop
        self.record = record
    }

    /// Whether the script ends the stream by dropping it.
    package var drops: Bool {
        state.withLockedValue { $0.ended == .drop }
    }

    /// Writes the `retry:` field, then sets the events going.
    func start() {
        if let retry = script.retryMilliseconds { writer.send(ServerSentEvent.retryDirective(milliseconds: retry)) }
        eventLoop.execute { self.step() }
    }

    /// The stream ended (the script's end, the client gone, a shutdown): no more timers.
    package func stop() {
        let clientLeft: Bool = state.withLockedValue { state in
            state.stopped = true
            state.timer?.cancel()
            state.timer = nil
            return state.ended == nil || state.ended == .hang || state.ended == .comments
        }
        if clientLeft { record(.drop, .in, nil) }
    }

    private func step() {
        let (index, stopped) = state.withLockedValue { state -> (Int, Bool) in
            defer { state.next += 1 }
            return (state.next, state.stopped)
        }
        guard !stopped else { return }
        if index < events.count {
            let event = events[index]
            guard writer.send(event.wireText) else { return }
            record(.event, .out, event)
            if index + 1 < events.count || script.then == .comments {
                schedule(after: script.every)
            } else {
                end()
            }
        } else if script.then == .comments {
            guard writer.send(": keep-alive\n\n") else { return }
            schedule(after: script.every > .zero ? script.every : .seconds(1))
        } else {
            end()
        }
    }

    private func schedule(after delay: Duration) {
        let timer = eventLoop.scheduleTask(in: TimeAmount(delay)) { self.step() }
        state.withLockedValue { state in
            if state.stopped { timer.cancel() } else { state.timer = timer }
        }
    }

    /// The last event went: end, drop or hang as the script says.
    private func end() {
        let ending = script.then == .comments ? SSEEnding.hang : script.then
        state.withLockedValue { $0.ended = ending }
        switch ending {
        case .end:
            record(.close, .out, nil)
            writer.finish()
        case .drop:
            record(.drop, .out, nil)
            writer.finish()
        case .hang, .comments:
            break
        }
    }
}
