import Foundation
import NIOCore
import NIOPosix

/// A scripted WebSocket client peer that speaks raw bytes, so tests can send well-formed frames
/// and deliberately broken ones and read exactly what the server answers.
final class TestWebSocket {
    struct Frame: Equatable {
        var fin: Bool
        var opcode: UInt8
        var payload: [UInt8]
        /// RSV1: a compressed message, with permessage-deflate.
        var rsv1 = false

        var text: String? { opcode == 0x1 ? String(decoding: payload, as: UTF8.self) : nil }

        /// Code and reason of a close frame.
        var close: (code: UInt16?, reason: String)? {
            guard opcode == 0x8 else { return nil }
            guard payload.count >= 2 else { return (nil, "") }
            return (UInt16(payload[0]) << 8 | UInt16(payload[1]), String(decoding: payload[2...], as: UTF8.self))
        }
    }

    struct UnexpectedEnd: Error {}

    /// The status code of the handshake response (101 when upgraded).
    private(set) var status = 0
    /// The handshake response's head, status line and fields.
    private(set) var head = ""
    private var buffer = ByteBuffer()
    private var inbound: NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator
    private let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>

    private init(inbound: NIOAsyncChannelInboundStream<ByteBuffer>, outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>) {
        self.inbound = inbound.makeAsyncIterator()
        self.outbound = outbound
    }

    /// Connects to `127.0.0.1:port`, sends a WebSocket handshake for `path` (with
    /// `sentWithHandshake` in the same write: frames that do not wait for the 101), reads the
    /// response head, and runs `body`. The connection is closed afterwards.
    static func with<T>(
        port: Int,
        path: String,
        extraHeaders: [String] = [],
        sentWithHandshake: [UInt8] = [],
        _ body: (TestWebSocket) async throws -> T
    ) async throws -> T {
        try await withRawConnection(port: port) { inbound, outbound in
            let socket = TestWebSocket(inbound: inbound, outbound: outbound)
            let key = Data((0..<16).map { _ in UInt8.random(in: 0...255) }).base64EncodedString()
            var request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            request += "Sec-WebSocket-Key: \(key)\r\nSec-WebSocket-Version: 13\r\n"
            for header in extraHeaders { request += header + "\r\n" }
            request += "\r\n"
            try await socket.writeRaw(Array(request.utf8) + sentWithHandshake)
            let head = try await socket.readHead()
            socket.head = head
            socket.status = Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
            return try await body(socket)
        }
    }

    // MARK: Sending

    func sendText(_ text: String) async throws {
        try await sendFrame(opcode: 0x1, payload: Array(text.utf8))
    }

    func sendBinary(_ bytes: [UInt8]) async throws {
        try await sendFrame(opcode: 0x2, payload: bytes)
    }

    /// Sends one frame, masked unless told otherwise, with the given flags.
    func sendFrame(fin: Bool = true, rsv: UInt8 = 0, opcode: UInt8, payload: [UInt8], masked: Bool = true) async throws {
        try await writeRaw(Self.frame(fin: fin, rsv: rsv, opcode: opcode, payload: payload, masked: masked))
    }

    /// The bytes of one frame, masked unless told otherwise.
    static func frame(fin: Bool = true, rsv: UInt8 = 0, opcode: UInt8, payload: [UInt8], masked: Bool = true) -> [UInt8] {
        var bytes: [UInt8] = [(fin ? 0x80 : 0) | (rsv << 4) | opcode]
        let maskBit: UInt8 = masked ? 0x80 : 0
        switch payload.count {
        case ..<126: bytes.append(maskBit | UInt8(payload.count))
        case ..<65536: bytes.append(maskBit | 126); bytes += [UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        default:
            bytes.append(maskBit | 127)
            bytes += (0..<8).reversed().map { UInt8((UInt64(payload.count) >> (UInt64($0) * 8)) & 0xFF) }
        }
        if masked {
            let key = (0..<4).map { _ in UInt8.random(in: 0...255) }
            bytes += key
            bytes += payload.enumerated().map { $0.element ^ key[$0.offset % 4] }
        } else {
            bytes += payload
        }
        return bytes
    }

    /// Sends a close frame with a code and reason.
    func sendClose(code: UInt16 = 1000, reason: String = "") async throws {
        try await sendFrame(opcode: 0x8, payload: [UInt8(code >> 8), UInt8(code & 0xFF)] + Array(reason.utf8))
    }

    func writeRaw(_ bytes: [UInt8]) async throws {
        try await outbound.write(ByteBuffer(bytes: bytes))
    }

    // MARK: Receiving

    /// The next frame from the server, of any opcode.
    func receiveFrame() async throws -> Frame {
        while true {
            if let frame = parseFrame() { return frame }
            try await fill()
        }
    }

    /// The next text message, skipping pings and pongs; fails on anything else.
    func receiveText() async throws -> String {
        while true {
            let frame = try await receiveFrame()
            if frame.opcode == 0x9 || frame.opcode == 0xA { continue }
            guard let text = frame.text else { throw UnexpectedFrame(frame: frame) }
            return text
        }
    }

    /// Reads until a close frame arrives, and returns its code and reason.
    func receiveClose() async throws -> (code: UInt16?, reason: String) {
        while true {
            let frame = try await receiveFrame()
            if let close = frame.close { return close }
        }
    }

    /// Reads until the server closes the TCP connection; returns whether it did.
    func waitForEndOfStream() async throws {
        while try await inbound.next() != nil {}
    }

    struct UnexpectedFrame: Error, CustomStringConvertible {
        var frame: Frame
        var description: String {
            if let close = frame.close { return "expected a text message, got close \(close.code.map(String.init) ?? "-") \(close.reason)" }
            return "expected a text message, got opcode \(frame.opcode)"
        }
    }

    private func fill() async throws {
        guard var chunk = try await inbound.next() else { throw UnexpectedEnd() }
        buffer.writeBuffer(&chunk)
    }

    private func readHead() async throws -> String {
        while true {
            let view = buffer.readableBytesView
            if let end = view.firstRange(of: [13, 10, 13, 10]) {
                let length = view.distance(from: view.startIndex, to: end.upperBound)
                return buffer.readString(length: length) ?? ""
            }
            try await fill()
        }
    }

    private func parseFrame() -> Frame? {
        Self.parseFrame(from: &buffer)
    }

    /// The first whole frame in `buffer`, taken out of it; nil until one is whole.
    static func parseFrame(from buffer: inout ByteBuffer) -> Frame? {
        let bytes = Array(buffer.readableBytesView)
        guard bytes.count >= 2 else { return nil }
        var index = 2
        var length = Int(bytes[1] & 0x7F)
        if length == 126 {
            guard bytes.count >= 4 else { return nil }
            length = Int(bytes[2]) << 8 | Int(bytes[3])
            index = 4
        } else if length == 127 {
            guard bytes.count >= 10 else { return nil }
            length = bytes[2..<10].reduce(0) { $0 << 8 | Int($1) }
            index = 10
        }
        guard bytes.count >= index + length else { return nil }
        buffer.moveReaderIndex(forwardBy: index + length)
        return Frame(fin: bytes[0] & 0x80 != 0, opcode: bytes[0] & 0x0F, payload: Array(bytes[index..<index + length]), rsv1: bytes[0] & 0x40 != 0)
    }
}

/// Opens a TCP connection to `127.0.0.1:port` and runs `body` with its byte streams.
func withRawConnection<T>(
    port: Int,
    _ body: (NIOAsyncChannelInboundStream<ByteBuffer>, NIOAsyncChannelOutboundWriter<ByteBuffer>) async throws -> T
) async throws -> T {
    let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .connect(host: "127.0.0.1", port: port) { channel in
            channel.eventLoop.makeCompletedFuture {
                try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
            }
        }
    return try await channel.executeThenClose { inbound, outbound in
        try await body(inbound, outbound)
    }
}

/// Suspends until the task is cancelled.
func waitUntilCancelled() async {
    let (stream, continuation) = AsyncStream<Never>.makeStream()
    await withTaskCancellationHandler {
        for await _ in stream {}
    } onCancel: {
        continuation.finish()
    }
}
