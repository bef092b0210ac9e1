import Dispatch
import DuplexSchema
import Foundation
import NIOConcurrencyHelpers
import DuplexTesting
import NIOCore
import NIOEmbedded
import NIOPosix
import NIOWebSocket
import Testing

@testable import DuplexHost
@testable import DuplexChat

/// How a room delivers its events: outside its lock, one thread at a time, in order; and how an
/// event loop's writers drain at once up to a budget per turn.
@Suite("ChatRoom fan-out")
struct ChatRoomFanOutTests {
    /// Runs `body` on another thread; false when it has not returned within `timeout` (a
    /// deadlock), so that the test fails rather than hangs. The waiting, too, is done on a thread
    /// of its own: blocked on the cooperative pool (two threads in CI), it would stall every other
    /// test meanwhile.
    static func returns(within timeout: DispatchTimeInterval, _ body: @escaping @Sendable () -> Void) async -> Bool {
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            body()
            done.signal()
        }
        return await withCheckedContinuation { continuation in
            Thread.detachNewThread { continuation.resume(returning: done.wait(timeout: .now() + timeout) == .success) }
        }
    }

    @Test("a subscriber may call back into the room while an event is delivered to it: the fan-out holds no lock")
    func deliveryOutsideTheLock() async throws {
        let room = ChatRoom(name: "r", historyLimit: 10)
        let seen = NIOLockedValueBox([Int]())
        let subscriptionID = NIOLockedValueBox<UInt64?>(nil)
        let reentrant = RoomSubscriber(
            member: .init(name: "alice", session: "s-alice", token: "t-alice"),
            deliver: { event in
                // Both take the room's lock: under a fan-out that held it, this would deadlock.
                seen.withLockedValue { $0.append(room.subscriberCount) }
                if event.type == "message", let id = subscriptionID.withLockedValue({ $0 }) { room.unsubscribe(id) }
                return true
            },
            onOverflow: {}
        )
        let said = NIOLockedValueBox<ChatRoom.SayResult?>(nil)
        let returned = await Self.returns(within: .seconds(10)) {
            subscriptionID.withLockedValue { $0 = try? room.subscribe(reentrant, since: nil).get().id }
            said.withLockedValue { $0 = try? ChatRoomTests.say(room, "1", from: "alice", token: "t-alice") }
        }
        // Not returned: the room's lock is held for good, so nothing more may touch the room.
        try #require(returned, "the join and the say deadlocked")
        #expect(subscriptionID.withLockedValue { $0 } != nil)
        #expect(said.withLockedValue { $0 } == .accepted(seq: 2))
        // The join, then the message (after which alice left, from inside the delivery).
        #expect(seen.withLockedValue { $0 } == [1, 1])
        #expect(room.subscriberCount == 0)
        #expect(room.latestSeq == 3, "alice's departure was numbered and kept")
    }

    @Test("says from 8 threads at once: every subscriber gets every event once, in seq order, and each ack follows its message")
    func concurrentSaysStayInOrder() async throws {
        let room = ChatRoom(name: "r", historyLimit: 10_000)
        let senders = 8
        let perSender = 200
        // Each member's log: the seqs delivered to it, and "ack N" once its say N is acknowledged.
        let logs = (0..<senders).map { _ in NIOLockedValueBox([String]()) }
        for index in 0..<senders {
            let log = logs[index]
            let subscriber = RoomSubscriber(
                member: .init(name: "m\(index)", session: "s\(index)", token: "t\(index)"),
                deliver: { event in
                    log.withLockedValue { $0.append("\(event.seq)") }
                    return true
                },
                onOverflow: {}
            )
            _ = try room.subscribe(subscriber, since: nil).get()
        }
        let observer = ChatRoomTests.Recorder()
        _ = try room.subscribe(observer.subscriber(member: nil), since: nil).get()
        let failures = NIOLockedValueBox(0)
        let finished = await Self.returns(within: .seconds(30)) {
            let group = DispatchGroup()
            for index in 0..<senders {
                group.enter()
                Thread.detachNewThread {
                    defer { group.leave() }
                    for message in 0..<perSender {
                        guard case .accepted(let seq) = try? ChatRoomTests.say(room, "c\(message)", from: "m\(index)", token: "t\(index)") else {
                            failures.withLockedValue { $0 += 1 }
                            continue
                        }
                        room.afterFanOut { logs[index].withLockedValue { $0.append("ack \(seq)") } }
                    }
                }
            }
            group.wait()
        }
        try #require(finished, "the 8 senders did not finish within 30 s")
        #expect(failures.withLockedValue { $0 } == 0)
        let first = senders + 1
        let last = senders + senders * perSender
        #expect(observer.seqs == Array(first...last), "the observer got every message once, in order")
        for (index, log) in logs.enumerated() {
            let entries = log.withLockedValue { $0 }
            let delivered = entries.compactMap { Int($0) }
            // Member index joined at seq index + 1, and sees its own join and every later event.
            #expect(delivered == Array((index + 1)...last), "member \(index) got every event once, in order")
            let acks = entries.enumerated().filter { $0.element.hasPrefix("ack ") }
            #expect(acks.count == perSender)
            for (position, ack) in acks {
                let seq = ack.dropFirst(4)
                let message = entries.firstIndex(of: String(seq))
                #expect(message.map { $0 < position } == true, "member \(index): the ack of \(seq) came after the message")
            }
        }
    }

    @Test("a subscriber whose queue is full is told once and gets nothing more; one that left while the event was on its way is not told")
    func overflowOutsideTheLock() throws {
        let room = ChatRoom(name: "r", historyLimit: 100)
        // Refuses every message; it leaves while the first one is being delivered.
        let leftOverflows = NIOLockedValueBox(0)
        let leaving = RoomSubscriber(
            member: nil,
            deliver: { $0.type != "message" },
            onOverflow: { leftOverflows.withLockedValue { $0 += 1 } }
        )
        let leavingID = NIOLockedValueBox<UInt64?>(nil)
        let remover = RoomSubscriber(
            member: nil,
            deliver: { event in
                if event.type == "message", let id = leavingID.withLockedValue({ $0 }) { room.unsubscribe(id) }
                return true
            },
            onOverflow: {}
        )
        _ = try room.subscribe(remover, since: nil).get()
        leavingID.withLockedValue { $0 = try? room.subscribe(leaving, since: nil).get().id }
        let full = ChatRoomTests.Recorder(capacity: 2)
        _ = try room.subscribe(full.subscriber(member: nil), since: nil).get()
        let alice = ChatRoomTests.Recorder()
        _ = try room.subscribe(alice.subscriber(member: "alice"), since: nil).get()
        for index in 0..<5 { _ = try ChatRoomTests.say(room, "\(index)", from: "alice") }
        #expect(full.seqs == [1, 2])
        #expect(full.overflows.withLockedValue { $0 } == 1)
        #expect(room.subscriberCount == 3, "the remover, the full one (to be closed by its owner) and alice")
        #expect(leftOverflows.withLockedValue { $0 } == 0, "it had left: its owner ended it already")
        #expect(alice.seqs == [1, 2, 3, 4, 5, 6])
    }

    @Test("on an event loop, a long fan-out goes on in later turns of the loop, every event in order")
    func fanOutYieldsTheLoop() async throws {
        let room = ChatRoom(name: "r", historyLimit: 1_000)
        let count = ChatRoom.fanOutBatchesPerTurn * 3
        let seqs = NIOLockedValueBox([Int]())
        let (done, finished) = AsyncStream<Void>.makeStream()
        // Each message it is given makes the next one: every say adds a batch while the room is
        // delivering, so the delivering loop goes through more than a turn's worth.
        let chain = RoomSubscriber(
            member: .init(name: "chain", session: "s", token: "t"),
            deliver: { event in
                seqs.withLockedValue { $0.append(event.seq) }
                if event.type == "message", event.seq <= count {
                    _ = try? ChatRoomTests.say(room, "c\(event.seq)", from: "chain", token: "t")
                }
                if event.seq == count + 1 { finished.yield() }
                return true
            },
            onOverflow: {}
        )
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        try await loop.submit {
            _ = try room.subscribe(chain, since: nil).get()
            _ = try ChatRoomTests.say(room, "c0", from: "chain", token: "t")
        }.get()
        try await withTimeout {
            for await _ in done { break }
        }
        #expect(seqs.withLockedValue { $0 } == Array(1...(count + 1)))
    }

    @Test("on its loop, a writer writes a message at once, and holds presence for the loop's batch, in order")
    func presenceWaitsForTheBatch() throws {
        let channel = EmbeddedChannel()
        let writer = try Self.writer(on: channel, maxCount: 10)
        let written = { try Self.written(on: channel) }
        #expect(writer.offer(frame: ServerTextFrame.encode("message 1"), textBytes: 9))
        #expect(try written() == ["message 1"], "a message goes out at once")
        #expect(writer.offer(frame: ServerTextFrame.encode("joined"), textBytes: 6, batched: true))
        #expect(try written() == [], "presence waits for the loop's batch")
        #expect(writer.offer(frame: ServerTextFrame.encode("message 2"), textBytes: 9))
        #expect(try written() == [], "a message behind waiting presence waits with it")
        channel.embeddedEventLoop.run()
        #expect(try written() == ["joined", "message 2"])
        _ = try channel.finish()
    }

    /// A started writer on `channel`, behind swift-nio's frame encoder, holding at most
    /// `maxCount` frames.
    static func writer(on channel: EmbeddedChannel, maxCount: Int) throws -> ChannelTextWriter {
        try channel.pipeline.syncOperations.addHandler(WebSocketFrameEncoder())
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        let writer = ChannelTextWriter(
            channel: channel,
            outlet: try RawFrameOutlet.install(on: channel),
            drains: LoopDrains(eventLoop: channel.eventLoop, metrics: ServerMetrics().route("chat")),
            maxCount: maxCount,
            maxBytes: 1 << 20
        )
        writer.start(with: [])
        return writer
    }

    /// The texts of the frames written to `channel` since last asked.
    static func written(on channel: EmbeddedChannel) throws -> [String] {
        var texts: [String] = []
        while let frame = try channel.readOutbound(as: ByteBuffer.self) {
            texts.append(String(buffer: ServerTextFrame.payload(of: frame)))
        }
        return texts
    }

    /// Counts the flushes that reach the socket's end of the pipeline.
    final class FlushCounter: ChannelOutboundHandler, @unchecked Sendable {
        typealias OutboundIn = ByteBuffer
        var flushes = 0

        func flush(context: ChannelHandlerContext) {
            flushes += 1
            context.flush()
        }
    }

    @Test("room events offered together go out in one flush, in order; past the bound, the ones before it are accepted and the offer is refused")
    func eventsTogether() throws {
        let channel = EmbeddedChannel()
        let counter = FlushCounter()
        try channel.pipeline.syncOperations.addHandler(counter)
        let writer = try Self.writer(on: channel, maxCount: 2)
        channel.embeddedEventLoop.run()
        let before = counter.flushes
        let event = { (seq: Int) in RoomEvent(seq: seq, type: "message", json: #"{"seq":\#(seq)}"#, epoch: "E") }
        let written = { try Self.written(on: channel) }
        #expect(writer.offer([event(1), event(2)]))
        #expect(try written() == [#"{"seq":1}"#, #"{"seq":2}"#])
        #expect(counter.flushes - before == 1, "two events, one flush")
        #expect(!writer.offer([event(3), event(4), event(5)]), "the third of three does not fit in a queue of 2")
        #expect(try written() == [#"{"seq":3}"#, #"{"seq":4}"#], "the ones before it went out")
        #expect(counter.flushes - before == 2)
        _ = try channel.finish()
    }

    @Test("an event loop lets 2,048 writers drain at once per turn, then queues the rest for the turn's batch")
    func immediateDrainBudget() {
        let loop = EmbeddedEventLoop()
        let drains = LoopDrains(eventLoop: loop, metrics: ServerMetrics().route("chat"))
        let allowed = (0..<(LoopDrains.immediateDrainsPerTick + 10)).filter { _ in drains.mayDrainNow() }.count
        #expect(allowed == LoopDrains.immediateDrainsPerTick)
        #expect(!drains.mayDrainNow())
        loop.run()
        #expect(drains.mayDrainNow(), "the budget is full again in the next turn")
    }
}
