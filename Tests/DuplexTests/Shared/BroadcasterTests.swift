import Foundation
import Logging
import NIOConcurrencyHelpers
import Testing

@testable import Duplex
import DuplexTesting

@Suite("Broadcaster: per-consumer streams, lossless with a demand gate, or bounded by dropping")
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

    @Test("a consumer cancelled while an element is yielded to it: no deadlock (waiters are resumed outside the lock)")
    func cancelWhileYielding() async throws {
        // The reader's task holds its own lock while its stream's cancellation handler takes the
        // broadcaster's; a yield that resumed the reader under the broadcaster's lock needed the
        // task's: each waited for the other (seen once in CI, under ThreadSanitizer). Many rounds
        // of the race, on threads of their own, so that a deadlock fails the test instead of
        // hanging it.
        let done = DispatchSemaphore(value: 0)
        let rounds = NIOLockedValueBox(0)
        Thread.detachNewThread {
            let broadcaster = Broadcaster<Int>(limit: 100, label: "race", logger: Logger(label: "test"))
            for _ in 0..<10_000 {
                let stream = broadcaster.makeStream()
                let waiting = DispatchSemaphore(value: 0)
                let reader = Task {
                    var iterator = stream.makeAsyncIterator()
                    waiting.signal()
                    return await iterator.next()
                }
                waiting.wait()
                let start = DispatchSemaphore(value: 0)
                let cancelled = DispatchSemaphore(value: 0)
                Thread.detachNewThread {
                    start.wait()
                    reader.cancel()
                    cancelled.signal()
                }
                start.signal()
                broadcaster.yield(1)
                cancelled.wait()
                rounds.withLockedValue { $0 += 1 }
            }
            done.signal()
        }
        let finished = await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: done.wait(timeout: .now() + 60) == .success) }
        }
        #expect(finished, "deadlocked after \(rounds.withLockedValue { $0 }) rounds")
    }

    @Test(
        "a stream read once, then kept but not read, holds one idle watcher, however many waits were asked; each superseded one goes on at once, the last when the reader comes back"
    )
    func idleWatchersDoNotCollect() async throws {
        let broadcaster = Broadcaster<Int>(limit: 100, label: "numbers", logger: Logger(label: "test"))
        let reader = broadcaster.makeStream()
        let (proceed, goOn) = AsyncStream.makeStream(of: Void.self)
        let (firstRead, tookFirst) = AsyncStream.makeStream(of: Void.self)
        broadcaster.yield(0)
        let reading = Task {
            var read: [Int] = []
            var signals = proceed.makeAsyncIterator()
            for await number in reader {
                read.append(number)
                if number == 0 {
                    tookFirst.yield()
                    _ = await signals.next()
                }
            }
            return read
        }
        _ = try await firstRead.first(within: .seconds(10))
        broadcaster.yield(1)  // given, not read: the reader still holds 0, so the broadcaster is not idle
        let called = NIOLockedValueBox(0)
        let (calls, call) = AsyncStream.makeStream(of: Int.self)
        for _ in 0..<1000 {
            broadcaster.whenIdle {
                call.yield(
                    called.withLockedValue {
                        $0 += 1; return $0
                    })
            }
        }
        #expect(called.withLockedValue { $0 } == 999, "each wait superseded by the next went on at once")
        #expect(broadcaster.hasIdleWatcher, "the last one waits")
        // The reader takes the element and comes back for more: the broadcaster is idle, and the
        // last watcher is called.
        goOn.yield()
        _ = try await calls.first(within: .seconds(10)) { $0 == 1000 }
        #expect(!broadcaster.hasIdleWatcher)
        broadcaster.finish()
        #expect(await reading.value == [0, 1])
        #expect(called.withLockedValue { $0 } == 1000)
    }

    @Test("a stream made but never read keeps the watcher waiting until told to stop waiting for unread streams; one that reads still does")
    func neverReadIsIdleWhenTold() {
        let broadcaster = Broadcaster<Int>(limit: 100, label: "numbers", logger: Logger(label: "test"))
        let unread = broadcaster.makeStream()
        broadcaster.yield(1)
        let called = NIOLockedValueBox(0)
        broadcaster.whenIdle { called.withLockedValue { $0 += 1 } }
        #expect(called.withLockedValue { $0 } == 0, "a stream asked for may be about to be read")
        broadcaster.stopWaitingForUnread()
        #expect(called.withLockedValue { $0 } == 1, "no one read it: nothing to wait for")
        #expect(!broadcaster.hasIdleWatcher)
        // A new wait waits for the unread stream again, until told.
        broadcaster.whenIdle { called.withLockedValue { $0 += 1 } }
        #expect(called.withLockedValue { $0 } == 1)
        broadcaster.stopWaitingForUnread()
        #expect(called.withLockedValue { $0 } == 2)
        _ = unread
    }

    @Test("lossless: a consumer that stops reading closes the gate at the limit, loses nothing, and opens it again at half")
    func losslessGate() async {
        let gate = DemandGate()
        let opened = NIOLockedValueBox(0)
        gate.onOpen { opened.withLockedValue { $0 += 1 } }
        let broadcaster = Broadcaster<Int>(limit: 100, gate: gate, label: "numbers", logger: Logger(label: "test"))
        let reader = broadcaster.makeStream()
        for n in 0..<99 { broadcaster.yield(n) }
        #expect(gate.isOpen, "under the limit")
        broadcaster.yield(99)
        #expect(!gate.isOpen, "100 unread: the producer is held back")
        // A producer that read more before it noticed: still kept, never dropped.
        for n in 100..<150 { broadcaster.yield(n) }
        var iterator = reader.makeAsyncIterator()
        var seen: [Int] = []
        for _ in 0..<99 { if let value = await iterator.next() { seen.append(value) } }
        #expect(!gate.isOpen, "51 unread: not yet back under half")
        if let value = await iterator.next() { seen.append(value) }
        #expect(gate.isOpen, "50 unread: open again")
        #expect(opened.withLockedValue { $0 } == 1)
        for _ in 0..<50 { if let value = await iterator.next() { seen.append(value) } }
        #expect(seen == Array(0..<150))
        #expect(broadcaster.droppedCount == 0)
    }

    @Test("lossless in bytes: a consumer behind by the byte limit closes the gate")
    func losslessBytes() async {
        let gate = DemandGate()
        let broadcaster = Broadcaster<String>(
            limit: 1000, byteLimit: 1000, cost: { $0.utf8.count }, gate: gate, label: "text", logger: Logger(label: "test"))
        let reader = broadcaster.makeStream()
        for _ in 0..<9 { broadcaster.yield(String(repeating: "x", count: 100)) }
        #expect(gate.isOpen)
        broadcaster.yield(String(repeating: "x", count: 100))
        #expect(!gate.isOpen, "1000 bytes unread")
        var iterator = reader.makeAsyncIterator()
        for _ in 0..<5 { _ = await iterator.next() }
        #expect(gate.isOpen, "500 bytes unread")
    }

    @Test("a consumer that lets go of its stream, or is cancelled, no longer holds the producer back")
    func releasedConsumer() async {
        let gate = DemandGate()
        let broadcaster = Broadcaster<Int>(limit: 10, gate: gate, label: "numbers", logger: Logger(label: "test"))
        var stalled: AsyncStream<Int>? = broadcaster.makeStream()
        for n in 0..<20 { broadcaster.yield(n) }
        #expect(!gate.isOpen)
        #expect(stalled != nil)
        stalled = nil
        #expect(gate.isOpen, "the stream is gone, and its consumer with it")
        #expect(broadcaster.consumerCount == 0)

        let waiting = broadcaster.makeStream()
        let task = Task { () -> [Int] in
            var values: [Int] = []
            for await value in waiting { values.append(value) }
            return values
        }
        task.cancel()
        let values = await task.value
        #expect(values.isEmpty || values.allSatisfy { $0 >= 0 })
        #expect(broadcaster.consumerCount == 0, "a cancelled reader is removed")
    }

    @Test("a producer waiting on the gate goes on once the reader catches up")
    func asyncProducerWaits() async throws {
        let gate = DemandGate()
        let broadcaster = Broadcaster<Int>(limit: 10, gate: gate, label: "numbers", logger: Logger(label: "test"))
        let reader = broadcaster.makeStream()
        let producer = Task {
            for n in 0..<1000 {
                broadcaster.yield(n)
                await gate.waitUntilOpen()
            }
            broadcaster.finish()
        }
        var seen: [Int] = []
        for await value in reader {
            seen.append(value)
            #expect(broadcaster.bufferedCount <= 10, "the producer waits instead of piling up")
        }
        await producer.value
        #expect(seen == Array(0..<1000))
    }

    @Test("oldest(n) keeps the first n and drops new ones for that consumer alone; newest(n) keeps the last n; the log is not flooded")
    func droppingPolicies() async {
        let lines = NIOLockedValueBox<[String]>([])
        let logger = Logger(label: "test") { _ in Capture(lines: lines) }
        let gate = DemandGate()
        let broadcaster = Broadcaster<Int>(limit: 100, gate: gate, label: "numbers", logger: logger)
        let reader = broadcaster.makeStream()
        let oldest = broadcaster.makeStream(buffering: .oldest(100))  // never read until the end
        let newest = broadcaster.makeStream(buffering: .newest(10))  // never read until the end
        var seen: [Int] = []
        var iterator = reader.makeAsyncIterator()
        for n in 0..<25_100 {
            broadcaster.yield(n)
            if n % 50 == 49 {
                for _ in 0..<50 { if let value = await iterator.next() { seen.append(value) } }
            }
        }
        #expect(gate.isOpen, "dropping consumers never hold the producer back")
        #expect(seen == Array(0..<25_100), "a consumer that keeps up loses nothing")
        #expect(broadcaster.droppedCount == 25_000 + 25_090)
        #expect(lines.withLockedValue { $0.count } == 6, "the first drop, then one line per 10,000")
        broadcaster.finish()
        var kept: [Int] = []
        for await value in oldest { kept.append(value) }
        #expect(kept == Array(0..<100))
        var latest: [Int] = []
        for await value in newest { latest.append(value) }
        #expect(latest == Array(25_090..<25_100))
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
