import CompressNIO
import DuplexSchema
import HummingbirdWSCompression
import HummingbirdWebSocket
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// hummingbird-websocket's permessage-deflate, with two changes:
/// - **Bounded.** A message that inflates past the limit (a "zip bomb") gets close 1009
///   (message too big), as an uncompressed message that large does, instead of 1011. Inflating
///   stops at the limit, so memory stays bounded.
/// - **Lazy.** The zlib streams (about 90 KiB a connection) are made when the first compressed
///   message arrives or the first message above the threshold leaves, so an idle connection
///   that negotiated compression costs nothing more.
struct BoundedDeflate: WebSocketExtensionBuilder {
    static let name = "permessage-deflate"
    private let base: any WebSocketExtensionBuilder
    private let maxMessageBytes: Int
    private let minimumBytes: Int

    /// The extension factory for a server configuration.
    static func factory(_ compression: PerMessageDeflate, maxMessageBytes: Int) -> WebSocketExtensionFactory {
        let deflate = WebSocketExtensionFactory.perMessageDeflate(
            clientMaxWindow: compression.peerMaxWindowBits,
            clientNoContextTakeover: compression.peerNoContextTakeover,
            serverMaxWindow: compression.maxWindowBits,
            serverNoContextTakeover: compression.noContextTakeover,
            // zlib's default memory level (8) takes 128 KiB for the compressor's hash alone;
            // 5, as Python's websockets uses, takes 16 KiB for a little less compression.
            memoryLevel: 5,
            maxDecompressedFrameSize: maxMessageBytes,
            minFrameSizeToCompress: compression.minimumBytes
        )
        return WebSocketExtensionFactory {
            BoundedDeflate(base: deflate.build(), maxMessageBytes: maxMessageBytes, minimumBytes: compression.minimumBytes)
        }
    }

    private init(base: any WebSocketExtensionBuilder, maxMessageBytes: Int, minimumBytes: Int) {
        self.base = base
        self.maxMessageBytes = maxMessageBytes
        self.minimumBytes = minimumBytes
    }

    func clientRequestHeader() -> String { base.clientRequestHeader() }

    func serverReponseHeader(to request: WebSocketExtensionHTTPParameters) -> String? {
        base.serverReponseHeader(to: request)
    }

    func serverExtension(from request: WebSocketExtensionHTTPParameters) throws -> (any WebSocketExtension)? {
        let base = self.base
        return Bounded(make: { try base.serverExtension(from: request) }, maxMessageBytes: maxMessageBytes, minimumBytes: minimumBytes)
    }

    func clientExtension(from response: WebSocketExtensionHTTPParameters) throws -> (any WebSocketExtension)? {
        let base = self.base
        return Bounded(make: { try base.clientExtension(from: response) }, maxMessageBytes: maxMessageBytes, minimumBytes: minimumBytes)
    }

    /// Declined after all (the base builder made no extension).
    struct NotNegotiated: Error {}

    private final class Bounded: WebSocketExtension {
        private let make: @Sendable () throws -> (any WebSocketExtension)?
        private let made = NIOLockedValueBox<(any WebSocketExtension)?>(nil)
        let maxMessageBytes: Int
        let minimumBytes: Int
        var name: String { BoundedDeflate.name }
        var reservedBits: WebSocketFrame.ReservedBits { .rsv1 }

        init(make: @escaping @Sendable () throws -> (any WebSocketExtension)?, maxMessageBytes: Int, minimumBytes: Int) {
            self.make = make
            self.maxMessageBytes = maxMessageBytes
            self.minimumBytes = minimumBytes
        }

        /// The extension with its zlib streams, made on first need.
        private func base() throws -> any WebSocketExtension {
            try made.withLockedValue { made in
                if let made { return made }
                guard let fresh = try make() else { throw NotNegotiated() }
                made = fresh
                return fresh
            }
        }

        private var existing: (any WebSocketExtension)? { made.withLockedValue { $0 } }

        func processReceivedFrame(_ frame: WebSocketFrame, context: WebSocketExtensionContext) async throws -> WebSocketFrame {
            // Until a compressed message arrives, frames pass as the extension would pass them:
            // RSV1 can only mark the first frame of a message.
            guard let base = try existing ?? (frame.rsv1 ? base() : nil) else { return frame }
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
            if let existing { return try await existing.processFrameToSend(frame, context: context) }
            // A whole message under the threshold, or a control frame, goes out as it is, as the
            // extension would send it; anything else needs the compressor.
            let isData = frame.opcode == .text || frame.opcode == .binary || frame.opcode == .continuation
            guard isData, !(frame.fin && frame.opcode != .continuation && frame.data.readableBytes < minimumBytes) else { return frame }
            return try await base().processFrameToSend(frame, context: context)
        }

        func shutdown() async {
            await existing?.shutdown()
        }
    }
}
