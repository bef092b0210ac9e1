import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import DuplexServer

/// `GET /metrics/live`'s feed: one rendering per tick, shared by the subscribers of an interval.
@Suite("LiveMetricsFeed")
struct LiveMetricsFeedTests {
    /// A feed whose samples are a counter of renderings, so each event says which it was.
    static func feed() -> LiveMetricsFeed {
        let count = NIOLockedValueBox(0)
        return LiveMetricsFeed {
            count.withLockedValue { count in
                count += 1
                return "render \(count)"
            }
        }
    }

    /// The `data:` of every event queued so far, after finishing the sink.
    static func drain(_ sink: OutboundQueue) async -> [String] {
        sink.finish()
        var data: [String] = []
        for await text in sink.items {
            data.append(contentsOf: text.split(separator: "\n").filter { $0.hasPrefix("data: ") }.map { String($0.dropFirst(6)) })
        }
        return data
    }

    @Test("subscribers of one interval share each tick's rendering; each gets its first event when it subscribes; the timer stops with the last")
    func ticksAreShared() async {
        let loop = EmbeddedEventLoop()
        let feed = Self.feed()
        let sinks = (0..<3).map { _ in OutboundQueue(maxCount: 100, maxBytes: 1 << 20) }
        let stops = sinks.map { feed.subscribe($0, every: 100, on: loop) }
        #expect(feed.renders == 3, "a first event each, at once")
        loop.advanceTime(by: .milliseconds(300))
        #expect(feed.renders == 6, "three ticks, one rendering each, not one per subscriber")
        // Another interval has a timer of its own.
        let slow = OutboundQueue(maxCount: 100, maxBytes: 1 << 20)
        let stopSlow = feed.subscribe(slow, every: 1_000, on: loop)
        for stop in stops { stop() }
        loop.advanceTime(by: .milliseconds(1_000))
        #expect(feed.renders == 8, "the first interval's timer stopped with its last subscriber; the slow one ticked once")
        stopSlow()
        loop.advanceTime(by: .milliseconds(5_000))
        #expect(feed.renders == 8)
        for (index, sink) in sinks.enumerated() {
            #expect(await Self.drain(sink) == ["render \(index + 1)", "render 4", "render 5", "render 6"])
        }
        #expect(await Self.drain(slow) == ["render 7", "render 8"])
    }

    @Test("a subscriber that falls behind is ended and dropped; the others go on")
    func laggardIsDropped() async {
        let loop = EmbeddedEventLoop()
        let feed = Self.feed()
        let laggard = OutboundQueue(maxCount: 2, maxBytes: 1 << 20)
        let reader = OutboundQueue(maxCount: 100, maxBytes: 1 << 20)
        _ = feed.subscribe(laggard, every: 100, on: loop)
        let stop = feed.subscribe(reader, every: 100, on: loop)
        loop.advanceTime(by: .milliseconds(500))
        #expect(laggard.overflowed)
        #expect(await Self.drain(laggard) == ["render 1", "render 3"], "its first event and the first tick; then it was full and is ended")
        #expect(await Self.drain(reader) == ["render 2", "render 3", "render 4", "render 5", "render 6", "render 7"])
        stop()
    }
}
