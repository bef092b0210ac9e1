@testable import Duplex
import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing

/// The SSE request's handler on an embedded channel, its read timeout on the loop's virtual time:
/// the timer runs only while a read is wanted, so a reader that is behind (it holds reads back) is
/// never taken for a silent server, however long it stays away.
@Suite struct EventStreamResponseHandlerTests {
    static let readTimeout = TimeAmount.milliseconds(500)

    /// A channel with the handler, the request sent, and the response head arrived.
    static func opened() throws -> (EmbeddedChannel, EventLoopFuture<HTTPResponseHead>) {
        let channel = EmbeddedChannel()
        let request = EventStreamConnection.Request(head: HTTPRequestHead(version: .http1_1, method: .GET, uri: "/events"), body: nil)
        let handler = EventStreamResponseHandler(request: request, readTimeout: readTimeout, headPromise: channel.eventLoop.makePromise())
        try channel.pipeline.syncOperations.addHandler(handler)
        let head = handler.headPromise.futureResult
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
        #expect(try channel.readOutbound(as: HTTPClientRequestPart.self) == .head(request.head))
        try channel.writeInbound(HTTPClientResponsePart.head(HTTPResponseHead(version: .http1_1, status: .ok)))
        return (channel, head)
    }

    @Test func aReaderThatHoldsReadsBackIsNotSilence() throws {
        let (channel, head) = try Self.opened()
        #expect(try head.wait().status == .ok)
        // No read is wanted for ten read timeouts: nothing fails, the stream stays open.
        channel.embeddedEventLoop.advanceTime(by: .seconds(5))
        #expect(throws: Never.self) { try channel.throwIfErrorCaught() }
        #expect(channel.isActive)
        // The reader is back and bytes keep coming: each resets the timer.
        for _ in 0..<10 {
            channel.read()
            channel.embeddedEventLoop.advanceTime(by: .milliseconds(400))
            try channel.writeInbound(HTTPClientResponsePart.body(ByteBuffer(string: "data: x\n\n")))
            #expect(try channel.readInbound(as: ByteBuffer.self) == ByteBuffer(string: "data: x\n\n"))
        }
        #expect(channel.isActive)
        _ = try? channel.finish()
    }

    @Test func aSilentServerTimesOutOnceAReadIsWanted() throws {
        let (channel, _) = try Self.opened()
        channel.read()
        channel.embeddedEventLoop.advanceTime(by: Self.readTimeout - .milliseconds(1))
        #expect(throws: Never.self) { try channel.throwIfErrorCaught() }
        channel.embeddedEventLoop.advanceTime(by: .milliseconds(1))
        #expect { try channel.throwIfErrorCaught() } throws: { ($0 as? SSEError)?.code == .readTimeout }
        #expect(!channel.isActive)
    }
}
