import NIOCore
import NIOEmbedded
import Testing

@testable import DuplexHost

/// Where a writer under test hands its chunks: kept, in order, as text.
final class CollectingOutput: EventStreamOutput {
    var isWritable = true
    private(set) var written: [String] = []
    private(set) var finished: Bool?

    func write(_ chunks: [ByteBuffer]) {
        written.append(contentsOf: chunks.map { String(buffer: $0) })
    }

    func writerFinished(overflowed: Bool) {
        finished = overflowed
    }

    /// The `data:` lines of what was written, without the field name.
    var data: [String] {
        written.flatMap { $0.split(separator: "\n").filter { $0.hasPrefix("data: ") }.map { String($0.dropFirst(6)) } }
    }

    /// A writer that hands its chunks here, on `loop`.
    func writer(on loop: EmbeddedEventLoop, maxCount: Int = 100, maxBytes: Int = 1 << 20) -> EventStreamWriter {
        EventStreamWriter(output: self, eventLoop: loop, maxCount: maxCount, maxBytes: maxBytes)
    }
}

/// An SSE stream's writer: bounded, in order, held back while the channel is not writable or
/// the stream is stalled (issue 16: a room SSE watcher that never read held about 100 MB).
@Suite("EventStreamWriter")
struct EventStreamWriterTests {
    @Test("what waits for a channel that is not writable is bounded in count and in bytes; one piece larger than the bound passes alone")
    func bounds() {
        let loop = EmbeddedEventLoop()
        let output = CollectingOutput()
        output.isWritable = false
        let writer = output.writer(on: loop, maxCount: 3, maxBytes: 100)
        #expect(writer.offer(String(repeating: "a", count: 60)))
        #expect(!writer.offer(String(repeating: "b", count: 60)), "120 bytes would pass 100")
        #expect(writer.offer(String(repeating: "c", count: 40)))
        #expect(writer.offer(""))
        #expect(!writer.offer(""), "a fourth piece fits the bytes, but passes the count")
        #expect(writer.overflowed)
        #expect(output.written.isEmpty, "nothing goes to a channel that is not writable")
        output.isWritable = true
        writer.drain()
        #expect(output.written == [String(repeating: "a", count: 60), String(repeating: "c", count: 40), ""])
        #expect(writer.offer(String(repeating: "d", count: 500)), "what was written no longer counts: a piece over the bound passes alone")
        #expect(output.written.last == String(repeating: "d", count: 500))
    }

    @Test("send ends the stream when a piece does not fit; the end comes after everything accepted")
    func sendEndsWhenFull() {
        let loop = EmbeddedEventLoop()
        let output = CollectingOutput()
        output.isWritable = false
        let writer = output.writer(on: loop, maxCount: 2)
        #expect(writer.send("one"))
        #expect(writer.send("two"))
        #expect(!writer.send("three"))
        #expect(output.finished == nil, "not before what was accepted is written")
        output.isWritable = true
        writer.drain()
        #expect(output.written == ["one", "two"])
        #expect(output.finished == true, "finished, for falling behind")
        #expect(!writer.offer("four"), "a finished writer accepts nothing")
    }

    @Test("a stall holds writes back until it is over; then they go in order")
    func stall() {
        let loop = EmbeddedEventLoop()
        let output = CollectingOutput()
        let writer = output.writer(on: loop)
        writer.stall(for: .seconds(2))
        #expect(writer.offer("a"))
        #expect(writer.offer("b"))
        loop.advanceTime(by: .seconds(1))
        #expect(output.written.isEmpty)
        loop.advanceTime(by: .seconds(1))
        #expect(output.written == ["a", "b"])
        writer.finish()
        #expect(output.finished == false, "finished by its source, not for falling behind")
    }

    @Test("a tick backlog far past the writer's bounds waits for each batch to drain, and goes out whole and in order, a batch per turn of the loop")
    func backlogWaitsForDrain() throws {
        let loop = EmbeddedEventLoop()
        let output = CollectingOutput()
        output.isWritable = false
        let writer = output.writer(on: loop, maxCount: 16)
        let ticks = TickClock()
        let interval: Int64 = 10
        let first = ticks.currentTick(intervalMilliseconds: interval) - 1_000
        let source = TickSource(ticks: ticks, intervalMilliseconds: interval, first: first, writer: writer, eventLoop: loop)
        defer { source.stop() }
        loop.run()
        // One batch waits in the writer (at most its bound); nothing more is offered meanwhile.
        #expect(output.written.isEmpty)
        #expect(!writer.overflowed)
        var ids: [Int64] = []
        for _ in 0..<200 where (ids.last ?? first) < first + 999 {
            output.isWritable = true
            writer.drain()
            loop.run()
            ids = output.written.compactMap { $0.split(separator: "\n").first.flatMap { $0.hasPrefix("id: ") ? Int64($0.dropFirst(4)) : nil } }
        }
        #expect(ids.count >= 1_000, "every tick of the backlog: \(ids.count)")
        #expect(ids.first == first && zip(ids, ids.dropFirst()).allSatisfy { $1 == $0 + 1 }, "each once, in order")
        #expect(!writer.overflowed && output.finished == nil, "never past the bounds, never ended")
    }
}
