import CompressNIO
import DuplexSchema
import HummingbirdWSCompression
import HummingbirdWebSocket
import NIOCore
import NIOWebSocket

/// hummingbird-websocket's permessage-deflate, with one change: a frame that inflates past the
/// limit (a "zip bomb") gets close 1009 (message too big), as an uncompressed message that large
/// does, instead of 1011. Inflating stops at the limit, so memory stays bounded.
struct BoundedDeflate: WebSocketExtensionBuilder {
    static let name = "permessage-deflate"
    private let base: any WebSocketExtensionBuilder

    /// The extension factory for a server configuration.
    static func factory(_ compression: PerMessageDeflate, maxMessageBytes: Int) -> WebSocketExtensionFactory {
        let deflate = WebSocketExtensionFactory.perMessageDeflate(
            clientMaxWindow: compression.peerMaxWindowBits,
            clientNoContextTakeover: compression.peerNoContextTakeover,
            serverMaxWindow: compression.maxWindowBits,
            serverNoContextTakeover: compression.noContextTakeover,
            maxDecompressedFrameSize: maxMessageBytes,
            minFrameSizeToCompress: compression.minimumBytes
        )
        return WebSocketExtensionFactory { BoundedDeflate(base: deflate.build(), maxMessageBytes: maxMessageBytes) }
    }

    private let maxMessageBytes: Int

    private init(base: any WebSocketExtensionBuilder, maxMessageBytes: Int) {
        self.base = base
        self.maxMessageBytes = maxMessageBytes
    }

    func clientRequestHeader() -> String { base.clientRequestHeader() }

    func serverReponseHeader(to request: WebSocketExtensionHTTPParameters) -> String? {
        base.serverReponseHeader(to: request)
    }

    func serverExtension(from request: WebSocketExtensionHTTPParameters) throws -> (any WebSocketExtension)? {
        try base.serverExtension(from: request).map { Bounded(base: $0, maxMessageBytes: maxMessageBytes) }
    }

    func clientExtension(from response: WebSocketExtensionHTTPParameters) throws -> (any WebSocketExtension)? {
        try base.clientExtension(from: response).map { Bounded(base: $0, maxMessageBytes: maxMessageBytes) }
    }

    private struct Bounded: WebSocketExtension {
        let base: any WebSocketExtension
        let maxMessageBytes: Int
        var name: String { base.name }
        var reservedBits: WebSocketFrame.ReservedBits { base.reservedBits }

        func processReceivedFrame(_ frame: WebSocketFrame, context: WebSocketExtensionContext) async throws -> WebSocketFrame {
            let inflated: WebSocketFrame
            do {
                inflated = try await base.processReceivedFrame(frame, context: context)
            } catch let error as CompressNIOError where error == .bufferOverflow {
                // The handler answers this error with 1009.
                throw NIOWebSocketError.invalidFrameLength
            }
            // compress-nio's limit is approximate (its buffers round up), and a single-frame
            // message is not measured again after inflating: check the limit exactly here.
            guard inflated.data.readableBytes <= maxMessageBytes else { throw NIOWebSocketError.invalidFrameLength }
            return inflated
        }

        func processFrameToSend(_ frame: WebSocketFrame, context: WebSocketExtensionContext) async throws -> WebSocketFrame {
            try await base.processFrameToSend(frame, context: context)
        }

        func shutdown() async {
            await base.shutdown()
        }
    }
}
