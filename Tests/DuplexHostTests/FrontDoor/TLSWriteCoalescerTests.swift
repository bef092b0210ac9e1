import NIOCore
import NIOEmbedded
import Testing

@testable import DuplexHost

@Suite("TLSWriteCoalescer")
struct TLSWriteCoalescerTests {
    /// What reached the channel (NIOSSL's place), one element per write.
    static func written(_ channel: EmbeddedChannel) throws -> [String] {
        var writes: [String] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { writes.append(String(buffer: buffer)) }
        return writes
    }

    @Test("the writes between two flushes go out as one, in order, and every write's promise completes")
    func joins() throws {
        let channel = EmbeddedChannel(handler: TLSWriteCoalescer())
        let promises = (0..<3).map { _ in channel.eventLoop.makePromise(of: Void.self) }
        channel.write(ByteBuffer(string: "a"), promise: promises[0])
        channel.write(ByteBuffer(string: "bc"), promise: promises[1])
        channel.write(ByteBuffer(string: "def"), promise: nil)
        channel.write(ByteBuffer(string: "g"), promise: promises[2])
        #expect(try Self.written(channel).isEmpty, "nothing before the flush")
        channel.flush()
        #expect(try Self.written(channel) == ["abcdefg"])
        for promise in promises { #expect(throws: Never.self) { try promise.futureResult.wait() } }
        channel.write(ByteBuffer(string: "next"), promise: nil)
        channel.flush()
        #expect(try Self.written(channel) == ["next"])
        _ = try channel.finish()
    }

    @Test("a write of 64 KiB or more is not copied: it follows what was joined before it")
    func largeWritesPass() throws {
        let channel = EmbeddedChannel(handler: TLSWriteCoalescer())
        let large = String(repeating: "x", count: TLSWriteCoalescer.joinLimit)
        channel.write(ByteBuffer(string: "head"), promise: nil)
        channel.write(ByteBuffer(string: large), promise: nil)
        channel.write(ByteBuffer(string: "tail"), promise: nil)
        channel.flush()
        #expect(try Self.written(channel) == ["head", large, "tail"])
        _ = try channel.finish()
    }

    @Test("a close sends what was joined first; a failed write fails every promise joined into it")
    func closeAndFailure() throws {
        let channel = EmbeddedChannel(handler: TLSWriteCoalescer())
        channel.write(ByteBuffer(string: "last words"), promise: nil)
        channel.close(promise: nil)
        #expect(try Self.written(channel) == ["last words"])

        let failing = EmbeddedChannel(handlers: [FailingWrites(), TLSWriteCoalescer()])
        let first = failing.eventLoop.makePromise(of: Void.self)
        let second = failing.eventLoop.makePromise(of: Void.self)
        failing.write(ByteBuffer(string: "1"), promise: first)
        failing.write(ByteBuffer(string: "2"), promise: second)
        failing.flush()
        #expect(throws: FailingWrites.Refused.self) { try first.futureResult.wait() }
        #expect(throws: FailingWrites.Refused.self) { try second.futureResult.wait() }
        _ = try? failing.finish()
    }
}

/// Fails every write, as a closed connection would.
private final class FailingWrites: ChannelOutboundHandler {
    typealias OutboundIn = ByteBuffer
    struct Refused: Error {}
    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        promise?.fail(Refused())
    }
}
