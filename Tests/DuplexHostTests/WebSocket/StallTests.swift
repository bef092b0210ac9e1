@testable import DuplexHost
import DuplexWire
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

/// A stall (and a path switch, a stall for good) stops a connection both ways at once: what the
/// channel still reads meanwhile is kept, not answered, until it ends.
@Suite("the event-loop handler stalled")
struct StallTests {
    @Test("a ping read once a stall is asked for is not answered until the stall ends, then it is, in order with a message")
    func pingHeldDuringStall() throws {
        let registry = ConnectionRegistry(metrics: ServerMetrics())
        let channel = EmbeddedChannel()
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(WebSocketFrameEncoder())
        try pipeline.addHandler(
            EventLoopWebSocketHandler(
                configuration: .init(maxMessageBytes: 1 << 20, closeTimeout: .seconds(1)),
                registry: registry,
                service: EchoService.shared,
                metrics: ServerMetrics()
            )
        )
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        // The loop has not run the command yet when the bytes arrive (its I/O comes before its
        // tasks), as when a ping reaches the server right after `switchPath` returned; a read
        // the channel asked for before the stall brings bytes too.
        #expect(registry.send(.stall(.seconds(2)), matching: { _ in true }) == 1)
        try channel.writeInbound(EchoWriteTests.clientFrame(.ping, ByteBuffer(string: "p")))
        try channel.writeInbound(EchoWriteTests.clientFrame(.text, ByteBuffer(string: "m")))
        channel.pipeline.fireChannelReadComplete()
        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        #expect(try EchoWriteTests.written(channel).isEmpty, "nothing answered while stalled")

        channel.embeddedEventLoop.advanceTime(by: .seconds(1))
        let frames = try EchoWriteTests.decode(EchoWriteTests.written(channel))
        #expect(frames.map(\.opcode) == [.pong, .text])
        #expect(frames.map { String(buffer: $0.data) } == ["p", "m"])
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }
}
