@testable import DuplexHost
import DuplexWire
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

/// What the server writes for an echo: the frame it encodes itself, past NIO's encoder, as the
/// upgrade leaves the pipeline.
@Suite("the event-loop handler's writes: one buffer per frame, no copy for an echo")
struct EchoWriteTests {
    static let key = WebSocketMaskingKey([0x0A, 0xB0, 0x0C, 0xD0])!

    /// A connection as the server leaves it after the upgrade (NIO's encoder, which the handler
    /// writes past; the handler reads the bytes itself), served by `/echo`.
    static func channel() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(WebSocketFrameEncoder())
        try pipeline.addHandler(
            EventLoopWebSocketHandler(
                configuration: .init(maxMessageBytes: 1 << 20, closeTimeout: .seconds(1)),
                registry: ConnectionRegistry(metrics: ServerMetrics()),
                service: EchoService.shared,
                metrics: ServerMetrics()
            )
        )
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        return channel
    }

    /// A client's masked frame, as bytes.
    static func clientFrame(_ opcode: WebSocketOpcode, _ payload: ByteBuffer) -> ByteBuffer {
        let (frame, second) = WebSocketFrameBytes.encode(opcode: opcode, payload: payload, maskKey: key, allocator: ByteBufferAllocator())
        precondition(second == nil)
        return frame
    }

    static func written(_ channel: EmbeddedChannel) throws -> [ByteBuffer] {
        var buffers: [ByteBuffer] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { buffers.append(buffer) }
        return buffers
    }

    /// The frames NIO's decoder reads from `buffers`.
    static func decode(_ buffers: [ByteBuffer]) throws -> [WebSocketFrame] {
        let reader = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 2 << 20)))
        for buffer in buffers { try reader.writeInbound(buffer) }
        var frames: [WebSocketFrame] = []
        while let frame = try reader.readInbound(as: WebSocketFrame.self) { frames.append(frame) }
        return frames
    }

    @Test("a small echo is one buffer: the header written in front of the payload, in the buffer it was unmasked into")
    func smallEcho() throws {
        let channel = try Self.channel()
        let text = String(repeating: "x", count: 64)
        try channel.writeInbound(Self.clientFrame(.text, ByteBuffer(string: text)))
        channel.pipeline.fireChannelReadComplete()
        let buffers = try Self.written(channel)
        #expect(buffers.count == 1)
        let frame = try #require(buffers.first)
        // The unmasked payload starts `headroom` bytes into its buffer; the 2-byte header went
        // just before it. A copy would start at 0.
        #expect(frame.readerIndex == WebSocketFrameBytes.headroom - 2)
        #expect(frame.getBytes(at: frame.readerIndex, length: 2) == [0x81, 64])
        #expect(frame.getString(at: frame.readerIndex + 2, length: 64) == text)
        _ = try channel.finish(acceptAlreadyClosed: true)
    }

    @Test("a 1 MiB echo is one buffer too, and pings, pongs and the close frame are whole frames", arguments: [1 << 20])
    func largeEchoAndControlFrames(count: Int) throws {
        let channel = try Self.channel()
        let payload = ByteBuffer(bytes: (0..<count).map { UInt8(truncatingIfNeeded: $0) })
        try channel.writeInbound(Self.clientFrame(.binary, payload))
        try channel.writeInbound(Self.clientFrame(.ping, ByteBuffer(string: "hi")))
        try channel.writeInbound(Self.clientFrame(.connectionClose, ByteBuffer(bytes: [0x03, 0xE8])))
        channel.pipeline.fireChannelReadComplete()
        let buffers = try Self.written(channel)
        let frames = try Self.decode(buffers)
        #expect(buffers.count == 3, "one buffer per frame")
        #expect(frames.map(\.opcode) == [.binary, .pong, .connectionClose])
        #expect(frames.allSatisfy { $0.fin && $0.maskKey == nil })
        #expect(frames.first?.data == payload)
        #expect(frames.dropFirst().first?.data == ByteBuffer(string: "hi"))
        #expect(frames.last?.data == ByteBuffer(bytes: [0x03, 0xE8]))
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }
}
