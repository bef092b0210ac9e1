import Hummingbird
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// Closes a WebSocket connection with 1002 when the client sends an unmasked frame, and answers
/// 503 while the server refuses new connections (a chaos fault).
///
/// RFC 6455 section 5.1: "a server MUST close the connection upon receiving a frame that is not
/// masked … with a status code of 1002". Neither swift-nio's frame decoder nor swift-websocket
/// checks this, so this handler sits in front of the HTTP decoder and follows the byte stream: it
/// reads the first request head, and if that asks for a WebSocket upgrade, walks the frame
/// headers that follow, forwarding every byte unchanged. It keeps no payload, only the header
/// being read and how many payload bytes to skip. A connection that does not ask to upgrade
/// removes the handler after its first request head.
final class ClientMaskGuard: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    private enum Mode {
        /// Reading the first request head, which ends with CRLF CRLF.
        case requestHead(seen: [UInt8])
        /// Reading a frame header (2 to 14 bytes).
        case frameHeader([UInt8])
        /// Skipping this many payload bytes.
        case payload(UInt64)
        /// The connection is being closed; nothing more is forwarded.
        case closed
    }

    private static let maxRequestHead = 64 * 1024
    private static let chaosPrefix = Array(" /_chaos/".utf8)
    private let refusal: RefusalGate

    init(refusal: RefusalGate) {
        self.refusal = refusal
    }
    private static let upgradeField = Array("\nupgrade:".utf8)
    private static let webSocketToken = Array("websocket".utf8)
    private var mode: Mode = .requestHead(seen: [])

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        var index = buffer.readerIndex
        let end = buffer.writerIndex
        var remove = false
        scan: while index < end {
            switch mode {
            case .closed:
                return
            case .requestHead(var seen):
                let byte = buffer.getInteger(at: index, as: UInt8.self)!
                seen.append(byte)
                index += 1
                if seen.count >= 4, seen.suffix(4).elementsEqual([13, 10, 13, 10]) {
                    if refusal.isRefusing, !Array(seen.prefix(64)).contains(subsequence: Self.chaosPrefix) {
                        refuse(context: context)
                        return
                    }
                    // Compare bytes, not Characters: "\r\n" is one Character, so a String search
                    // for "\nupgrade:" would never match.
                    let head = seen.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }
                    if head.contains(subsequence: Self.upgradeField), head.contains(subsequence: Self.webSocketToken) {
                        mode = .frameHeader([])
                    } else {
                        remove = true
                        break scan
                    }
                } else if seen.count > Self.maxRequestHead {
                    remove = true
                    break scan
                } else {
                    mode = .requestHead(seen: seen)
                }
            case .payload(let remaining):
                let available = UInt64(end - index)
                if available >= remaining {
                    index += Int(remaining)
                    mode = .frameHeader([])
                } else {
                    index = end
                    mode = .payload(remaining - available)
                }
            case .frameHeader(var header):
                header.append(buffer.getInteger(at: index, as: UInt8.self)!)
                index += 1
                guard header.count >= 2 else {
                    mode = .frameHeader(header)
                    continue
                }
                let lengthCode = header[1] & 0x7F
                let needed = 2 + (lengthCode == 126 ? 2 : lengthCode == 127 ? 8 : 0) + 4
                guard header[1] & 0x80 != 0 else {
                    rejectUnmasked(context: context)
                    return
                }
                guard header.count >= needed else {
                    mode = .frameHeader(header)
                    continue
                }
                let length: UInt64
                switch lengthCode {
                case 126: length = UInt64(header[2]) << 8 | UInt64(header[3])
                case 127: length = header[2..<10].reduce(0) { $0 << 8 | UInt64($1) }
                default: length = UInt64(lengthCode)
                }
                mode = length == 0 ? .frameHeader([]) : .payload(length)
            }
        }
        context.fireChannelRead(data)
        if remove {
            context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
        }
    }

    /// Answers 503 and closes: the server is refusing new connections for a while.
    private func refuse(context: ChannelHandlerContext) {
        mode = .closed
        let body = #"{"error":"the server is refusing new connections (chaos)"}"#
        let response = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nRetry-After: 1\r\nConnection: close\r\n\r\n\(body)"
        let channel = context.channel
        context.writeAndFlush(NIOAny(context.channel.allocator.buffer(string: response))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    private func rejectUnmasked(context: ChannelHandlerContext) {
        mode = .closed
        let reason = Array("client frames must be masked".utf8)
        var frame = context.channel.allocator.buffer(capacity: 4 + reason.count)
        frame.writeBytes([0x88, UInt8(2 + reason.count), 0x03, 0xEA])  // FIN + close, 1002
        frame.writeBytes(reason)
        let channel = context.channel
        context.writeAndFlush(NIOAny(frame)).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}

extension Array where Element == UInt8 {
    /// Whether `needle` occurs in the array as a contiguous run of bytes.
    fileprivate func contains(subsequence needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, needle.count <= count else { return needle.isEmpty }
        for start in 0...(count - needle.count) where self[start] == needle[0] {
            if self[start..<(start + needle.count)].elementsEqual(needle) { return true }
        }
        return false
    }
}

/// Whether the server refuses new connections, and until when.
final class RefusalGate: Sendable {
    private let until = NIOLockedValueBox<ContinuousClock.Instant?>(nil)

    func refuse(for duration: Duration) {
        until.withLockedValue { $0 = .now + duration }
    }

    var isRefusing: Bool {
        until.withLockedValue { $0.map { $0 > .now } ?? false }
    }
}

/// A server child channel that puts a ``ClientMaskGuard`` in front of another one.
struct MaskGuardedChildChannel<Base: ServerChildChannel>: ServerChildChannel {
    let base: Base
    let refusal: RefusalGate

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Base.Value> {
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(ClientMaskGuard(refusal: self.refusal), position: .first)
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Base.Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}
