import DuplexSchema
import NIOConcurrencyHelpers
package import NIOCore

/// The subscribers of `GET /metrics/live`, and one timer for each interval they asked for.
///
/// At each tick the samples are read, rendered and encoded once, and the same text is given to
/// every subscriber of that interval; so a scrape costs the same for one open demo page as for a
/// hundred. A subscriber's first event is rendered for it alone, when it subscribes. A timer runs
/// while its interval has subscribers, on the event loop of the one that started it.
package final class LiveMetricsFeed: Sendable {
    package typealias Sink = EventStreamWriter

    private struct Interval {
        var sinks: [Int: Sink]
        var timer: RepeatedTask
    }

    private struct State {
        var nextID = 0
        var intervals: [Int64: Interval] = [:]
        /// Samples rendered, for the tests: once per tick and once per subscriber.
        var renders = 0
    }

    private let state = NIOLockedValueBox(State())
    private let render: @Sendable () -> String

    /// A feed of what `render` returns: one `metrics` event's data.
    package init(render: @escaping @Sendable () -> String) {
        self.render = render
    }

    /// Times the samples were rendered.
    package var renders: Int { state.withLockedValue { $0.renders } }

    /// Gives `sink` the samples now and then every `milliseconds`, until the returned stop is
    /// called or the sink falls behind.
    package func subscribe(_ sink: Sink, every milliseconds: Int64, on eventLoop: any EventLoop) -> EventStream.Stop {
        guard let first = event() else {
            sink.finish()
            return {}
        }
        sink.send(first)
        let id = state.withLockedValue { state in
            defer { state.nextID += 1 }
            let id = state.nextID
            if state.intervals[milliseconds] != nil {
                state.intervals[milliseconds]!.sinks[id] = sink
            } else {
                let timer = eventLoop.scheduleRepeatedTask(initialDelay: .milliseconds(milliseconds), delay: .milliseconds(milliseconds)) { _ in
                    self.tick(milliseconds)
                }
                state.intervals[milliseconds] = Interval(sinks: [id: sink], timer: timer)
            }
            return id
        }
        return { self.unsubscribe(id, from: milliseconds) }
    }

    private func unsubscribe(_ id: Int, from milliseconds: Int64) {
        state.withLockedValue { state in
            guard state.intervals[milliseconds]?.sinks.removeValue(forKey: id) != nil else { return }
            if state.intervals[milliseconds]!.sinks.isEmpty {
                state.intervals.removeValue(forKey: milliseconds)?.timer.cancel()
            }
        }
    }

    private func tick(_ milliseconds: Int64) {
        let sinks = state.withLockedValue { $0.intervals[milliseconds]?.sinks } ?? [:]
        guard !sinks.isEmpty, let text = event() else { return }
        for (id, sink) in sinks where !sink.send(text) {
            // Fell behind: its stream ends, and the client resumes.
            unsubscribe(id, from: milliseconds)
        }
    }

    /// One `metrics` event, encoded.
    private func event() -> String? {
        state.withLockedValue { $0.renders += 1 }
        return try? ServerSentEvent(event: "metrics", data: render()).encoded()
    }
}
