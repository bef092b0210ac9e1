@testable import DuplexHost
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

/// Chat members get room events as frames encoded once and shared (``ServerTextFrame``): the
/// bytes must be what swift-nio's decoder reads as the same text, at every length boundary.
@Suite("server text frames encoded once")
struct ServerTextFrameTests {
    @Test("the encoded frame decodes to one final, unmasked text frame with the same text", arguments: [0, 1, 125, 126, 127, 65_535, 65_536, 70_000])
    func decodes(length: Int) throws {
        let text = String(repeating: "é", count: length / 2) + String(repeating: "a", count: length % 2)
        let encoded = ServerTextFrame.encode(text)
        #expect(encoded.readableBytes == text.utf8.count + ServerTextFrame.headerSize(text.utf8.count))

        let channel = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)))
        defer { _ = try? channel.finish() }
        try channel.writeInbound(encoded)
        let frame = try #require(try channel.readInbound(as: WebSocketFrame.self))
        #expect(frame.fin)
        #expect(frame.opcode == .text)
        #expect(frame.maskKey == nil)
        #expect(String(buffer: frame.unmaskedData) == text)
        #expect(try channel.readInbound(as: WebSocketFrame.self) == nil, "exactly one frame")
    }
}
