import Logging
import NIOConcurrencyHelpers
import Testing

@testable import Duplex

@Suite("Broadcaster: per-consumer streams, bounded buffers")
struct BroadcasterTests {
    /// A log handler that keeps every message.
    struct Capture: LogHandler {
        let lines: NIOLockedValueBox<[String]>
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) { lines.withLockedValue { $0.append("\(event.message)") } }
    }

    @Test("every consumer gets every element; a full consumer drops new ones alone, and the log is not flooded")
    func boundedBuffers() async {
        let lines = NIOLockedValueBox<[String]>([])
        let logger = Logger(label: "test") { _ in Capture(lines: lines) }
        let broadcaster = Broadcaster<Int>(limit: 100, label: "numbers", logger: logger)
        let reader = broadcaster.makeStream()
        let stalled = broadcaster.makeStream()  // never read
        var seen: [Int] = []
        for n in 0..<25_100 {
            broadcaster.yield(n)
            // the reader keeps up: drain what is buffered every 50 elements
            if n % 50 == 49 {
                var iterator = reader.makeAsyncIterator()
                for _ in 0..<50 { if let value = await iterator.next() { seen.append(value) } }
            }
        }
        #expect(seen == Array(0..<25_100), "a consumer that keeps up loses nothing")
        #expect(broadcaster.droppedCount == 25_000, "the stalled consumer kept its first 100 and dropped the rest")
        #expect(lines.withLockedValue { $0.count } == 3, "the first drop, then one line per 10,000")
        broadcaster.finish()
        var kept: [Int] = []
        for await value in stalled { kept.append(value) }
        #expect(kept == Array(0..<100))
    }

    @Test("a stream asked for after finish is already finished; a stream can start with a value")
    func finishAndFirst() async {
        let broadcaster = Broadcaster<Int>(limit: 10, label: "x", logger: Logger(label: "x"))
        let stream = broadcaster.makeStream(startingWith: 7)
        broadcaster.yield(8)
        broadcaster.finish()
        var values: [Int] = []
        for await value in stream { values.append(value) }
        #expect(values == [7, 8])
        var late: [Int] = []
        for await value in broadcaster.makeStream(startingWith: 1) { late.append(value) }
        #expect(late == [1])
    }
}
