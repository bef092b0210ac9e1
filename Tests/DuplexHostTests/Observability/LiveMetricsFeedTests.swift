import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing

@testable import DuplexHost

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

    @Test("subscribers of one interval share each tick's rendering; each gets its first event when it subscribes; the timer stops with the last")
    func ticksAreShared() {
        let loop = EmbeddedEventLoop()
        let feed = Self.feed()
        let outputs = (0..<3).map { _ in CollectingOutput() }
        let stops = outputs.map { feed.subscribe($0.writer(on: loop), every: 100, on: loop) }
        #expect(feed.renders == 3, "a first event each, at once")
        loop.advanceTime(by: .milliseconds(300))
        #expect(feed.renders == 6, "three ticks, one rendering each, not one per subscriber")
        // Another interval has a timer of its own.
        let slow = CollectingOutput()
        let stopSlow = feed.subscribe(slow.writer(on: loop), every: 1_000, on: loop)
        for stop in stops { stop() }
        loop.advanceTime(by: .milliseconds(1_000))
        #expect(feed.renders == 8, "the first interval's timer stopped with its last subscriber; the slow one ticked once")
        stopSlow()
        loop.advanceTime(by: .milliseconds(5_000))
        #expect(feed.renders == 8)
        for (index, output) in outputs.enumerated() {
            #expect(output.data == ["render \(index + 1)", "render 4", "render 5", "render 6"])
        }
        #expect(slow.data == ["render 7", "render 8"])
    }

    @Test("a subscriber that falls behind is ended and dropped; the others go on")
    func laggardIsDropped() {
        let loop = EmbeddedEventLoop()
        let feed = Self.feed()
        // A channel that takes nothing: what it is given waits in its writer.
        let laggard = CollectingOutput()
        laggard.isWritable = false
        let laggardWriter = laggard.writer(on: loop, maxCount: 2)
        let reader = CollectingOutput()
        _ = feed.subscribe(laggardWriter, every: 100, on: loop)
        let stop = feed.subscribe(reader.writer(on: loop), every: 100, on: loop)
        loop.advanceTime(by: .milliseconds(500))
        #expect(laggardWriter.overflowed)
        laggard.isWritable = true
        laggardWriter.drain()
        #expect(laggard.data == ["render 1", "render 3"], "its first event and the first tick; then it was full and is ended")
        #expect(laggard.finished == true)
        #expect(reader.data == ["render 2", "render 3", "render 4", "render 5", "render 6", "render 7"])
        stop()
    }
}
