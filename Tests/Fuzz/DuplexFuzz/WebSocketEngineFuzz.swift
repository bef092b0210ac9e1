#if DEBUG
@testable import Duplex
@testable import DuplexHost
@testable import DuplexServer
import DuplexSchema
import DuplexWire
import Foundation
import NIOCore
import NIOEmbedded
import NIOWebSocket

/// What an engine made of a frame sequence: the messages it handed on, in order, and how the
/// connection ended.
struct EngineOutcome: Equatable, CustomStringConvertible {
    enum Ending: Equatable {
        /// Still open after the last frame.
        case open
        /// The peer's close was accepted (answered) or refused as malformed.
        case peerClose(accepted: Bool)
        /// The engine failed the connection with this close code.
        case failed(UInt16)
    }

    var messages: [WebSocketMessage] = []
    var ending: Ending = .open

    var description: String {
        "\(messages.count) messages \(messages.map { $0.text.map { "text(\($0.utf8.count))" } ?? "binary(\($0.data.count))" }), ending \(ending)"
    }
}

/// DuplexWire's `WebSocketEngine` in both roles on one frame sequence: as the client runs it,
/// and inside the server's `EventLoopWebSocketHandler` (behind NIO's frame decoder, as the
/// server installs it). One engine: the two ends must agree on every sequence.
enum WebSocketEngineFuzz {
    static let maxMessageBytes = 4096

    /// The raw server pipeline: any bytes a client may send after the upgrade.
    static let serverTarget = FuzzTarget(
        name: "ws-server",
        properties:
            "no crash, no hang; what the server writes is well formed: text it echoes is valid UTF-8, nothing larger than the message limit, RSV1 only when permessage-deflate was agreed, at most one close frame and nothing after it, close codes a server may send"
    ) { bytes in
        var input = FuzzInput(bytes)
        let compressed = input.byte() & 1 == 1
        let chunkCount = Int(input.byte() % 8)
        let stream = input.rest()
        let channel = makeServerChannel(compressed: compressed)
        var chunker = FuzzInput(bytes)
        for chunk in chunker.chunks(of: stream, count: chunkCount) where channel.isActive {
            _ = try? channel.writeInbound(ByteBuffer(bytes: chunk))
            channel.pipeline.fireChannelReadComplete()
        }
        checkServerOutput(channel, compressed: compressed)
        finish(channel)
    }

    /// The client and the server engine on the same frames (masked for the server, unmasked
    /// for the client), compared.
    static let enginesTarget = FuzzTarget(
        name: "ws-engines",
        properties:
            "no crash; the engine as the client and inside the server delivers the same messages in the same order, fails a connection for the same reasons with the same close code, and accepts the same close frames; permessage-deflate included (each end's inflater on the same compressed stream)"
    ) { bytes in
        var input = FuzzInput(bytes)
        let compressed = input.byte() & 1 == 1
        let stream = input.rest()
        // Frames as NIO's decoder reads them; a decoding error ends the sequence there.
        // With the server's frame limit, its message limit: both ends see the same frames.
        let decoder = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: maxMessageBytes)))
        _ = try? decoder.writeInbound(ByteBuffer(bytes: stream))
        var frames: [WebSocketFrame] = []
        while let frame = try? decoder.readInbound(as: WebSocketFrame.self) { frames.append(frame) }
        _ = try? decoder.finish()

        let server = serverOutcome(frames, compressed: compressed)
        let client = clientOutcome(frames, compressed: compressed)
        require(
            server == client, "the engines disagree on \(frames.count) frames (compressed: \(compressed)):\n  server \(server)\n  client \(client)")
    }

    /// DuplexWire's parser, which the server reads frames with, next to swift-nio's decoder.
    static let parserTarget = FuzzTarget(
        name: "ws-parser",
        properties:
            "no crash; WebSocketFrameParser reads the same frames as NIO's WebSocketFrameDecoder (bits, opcode, mask, payload) from any bytes in any chunks, and refuses at the same frame with the same error"
    ) { bytes in
        var input = FuzzInput(bytes)
        let chunkCount = Int(input.byte() % 8)
        let stream = input.rest()
        var chunker = FuzzInput(bytes)
        let chunks = chunker.chunks(of: stream, count: chunkCount)

        let decoder = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: maxMessageBytes)))
        var expected: [WebSocketFrame] = []
        var expectedError: NIOWebSocketError?
        for chunk in chunks where expectedError == nil {
            do {
                try decoder.writeInbound(ByteBuffer(bytes: chunk))
            } catch {
                expectedError = error as? NIOWebSocketError
                require(expectedError != nil, "NIO's decoder threw \(error)")
            }
            while let frame = try? decoder.readInbound(as: WebSocketFrame.self) { expected.append(frame) }
        }
        _ = try? decoder.finish(acceptAlreadyClosed: true)

        var parser = WebSocketFrameParser(maxFrameSize: maxMessageBytes)
        var frames: [WebSocketFrame] = []
        var parserError: NIOWebSocketError?
        reading: for chunk in chunks {
            parser.append(ByteBuffer(bytes: chunk))
            do {
                while let frame = try parser.next() { frames.append(frame) }
            } catch {
                parserError = error as? NIOWebSocketError
                require(parserError != nil, "the parser threw \(error)")
                break reading
            }
        }
        require(frames == expected, "the parser read \(frames.count) frames, NIO's decoder \(expected.count)")
        require(
            parserError == expectedError,
            "the parser refused with \(String(describing: parserError)), NIO's decoder with \(String(describing: expectedError))")
    }

    // MARK: The server engine

    static func makeServerChannel(compressed: Bool) -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        let handler = EventLoopWebSocketHandler(
            configuration: .init(maxMessageBytes: maxMessageBytes, closeTimeout: .seconds(1)),
            registry: ConnectionRegistry(metrics: ServerMetrics()),
            service: EchoService.shared,
            metrics: ServerMetrics(),
            deflate: compressed ? DeflateContext(agreement: DeflateAgreement(), zlib: LoopZlib()) : nil
        )
        let pipeline = channel.pipeline.syncOperations
        // As the server installs it: behind NIO's encoder, which the handler writes its own bytes
        // past; the handler reads the bytes itself.
        try! pipeline.addHandler(WebSocketFrameEncoder())
        try! pipeline.addHandler(handler)
        _ = try! channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        return channel
    }

    /// Closes the channel (if the server has not), runs what its loop still holds (the close
    /// timeout's task), and drops the outbound frames: nothing of it stays behind.
    static func finish(_ channel: EmbeddedChannel) {
        _ = try? channel.finish(acceptAlreadyClosed: true)
        channel.embeddedEventLoop.advanceTime(by: .seconds(5))
        channel.embeddedEventLoop.run()
    }

    /// A frame's bytes as NIO's encoder writes them (reserved bits and all).
    static func encoded(_ frame: WebSocketFrame) -> [ByteBuffer] {
        let encoder = EmbeddedChannel(handler: WebSocketFrameEncoder())
        defer { _ = try? encoder.finish(acceptAlreadyClosed: true) }
        try! encoder.writeOutbound(frame)
        var buffers: [ByteBuffer] = []
        while let buffer = try? encoder.readOutbound(as: ByteBuffer.self) { buffers.append(buffer) }
        return buffers
    }

    /// What the server wrote, read back by NIO's decoder: the bytes must be well-formed frames.
    static func serverFrames(_ channel: EmbeddedChannel) -> [WebSocketFrame] {
        let reader = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 20)))
        defer { _ = try? reader.finish(acceptAlreadyClosed: true) }
        while let bytes = try? channel.readOutbound(as: ByteBuffer.self) {
            do {
                try reader.writeInbound(bytes)
            } catch {
                require(false, "the server wrote bytes that are not WebSocket frames: \(error)")
            }
        }
        var frames: [WebSocketFrame] = []
        while let frame = try? reader.readInbound(as: WebSocketFrame.self) { frames.append(frame) }
        return frames
    }

    static func checkServerOutput(_ channel: EmbeddedChannel, compressed: Bool) {
        var closed = false
        for frame in serverFrames(channel) {
            require(!closed, "the server wrote a \(frame.opcode) frame after its close frame")
            require(frame.maskKey == nil, "the server masked a frame")
            require(!frame.rsv1 || compressed, "RSV1 without permessage-deflate")
            switch frame.opcode {
            case .text where !frame.rsv1:
                require(String(validating: frame.data.readableBytesView, as: UTF8.self) != nil, "the server sent text that is not UTF-8")
                fallthrough
            case .binary, .text:
                require(frame.data.readableBytes <= maxMessageBytes + 64, "the server sent \(frame.data.readableBytes) bytes, past the limit")
            case .connectionClose:
                closed = true
                var data = frame.data
                let code = data.readInteger(as: UInt16.self)
                // Its own codes, or the client's, echoed (any code an endpoint may send).
                require(code.map { WebSocketCloseCode($0).isValidOnWire } ?? true, "the server sent close code \(String(describing: code))")
                require(String(validating: data.readableBytesView, as: UTF8.self) != nil, "the server's close reason is not UTF-8")
            case .pong:
                require(frame.data.readableBytes <= 125, "a pong longer than a control frame may be")
            default:
                require(false, "the server sent a \(frame.opcode) frame")
            }
        }
    }

    static func serverOutcome(_ frames: [WebSocketFrame], compressed: Bool) -> EngineOutcome {
        let channel = makeServerChannel(compressed: compressed)
        defer { finish(channel) }
        // The server's answers to compressed messages are compressed: a client-side inflater
        // reads them back (the server's stream persists, as the default agreement says).
        var reader = compressed ? DeflateContext(agreement: DeflateAgreement(), zlib: LoopZlib()) : nil
        var outcome = EngineOutcome()
        let key = WebSocketMaskingKey([0x37, 0xFA, 0x21, 0x3D])!
        for frame in frames where channel.isActive {
            // NIO's encoder masks the payload with the frame's key.
            let masked = WebSocketFrame(
                fin: frame.fin, rsv1: frame.rsv1, rsv2: frame.rsv2, rsv3: frame.rsv3, opcode: frame.opcode, maskKey: key, data: frame.unmaskedData)
            for bytes in encoded(masked) { _ = try? channel.writeInbound(bytes) }
            channel.pipeline.fireChannelReadComplete()
            for answer in serverFrames(channel) {
                switch answer.opcode {
                case .text, .binary:
                    var payload = answer.data
                    if answer.rsv1, reader != nil {
                        guard let inflated = try? reader!.inflate(payload, maxBytes: maxMessageBytes, allocator: ByteBufferAllocator()) else {
                            require(false, "the server's compressed echo does not inflate")
                            return outcome
                        }
                        payload = inflated
                    }
                    outcome.messages.append(answer.opcode == .text ? .string(String(buffer: payload)) : .data(Data(payload.readableBytesView)))
                case .connectionClose:
                    var data = answer.data
                    let code = data.readInteger(as: UInt16.self) ?? 1005
                    if frame.opcode == .connectionClose {
                        // An accepted close is answered with the peer's code and no reason; a
                        // refused one with the failure's code and its reason.
                        outcome.ending = .peerClose(accepted: data.readableBytes == 0)
                    } else {
                        outcome.ending = .failed(code)
                    }
                    return outcome
                default:
                    break
                }
            }
        }
        return outcome
    }

    // MARK: The client engine

    static func clientOutcome(_ frames: [WebSocketFrame], compressed: Bool) -> EngineOutcome {
        var engine = WebSocketEngine(role: .client, maxMessageBytes: maxMessageBytes, compressionNegotiated: compressed)
        // As the client sets it up: its own streams, going on across messages.
        var deflate = compressed ? DeflateContext(agreement: DeflateAgreement(), zlib: LoopZlib(memoryLevel: 8), ownStreams: true) : nil
        var outcome = EngineOutcome()
        for frame in frames {
            let unmasked = WebSocketFrame(
                fin: frame.fin, rsv1: frame.rsv1, rsv2: frame.rsv2, rsv3: frame.rsv3, opcode: frame.opcode, data: frame.unmaskedData)
            var action = engine.received(unmasked)
            if case .inflate(let opcode, let buffer) = action {
                action = engine.inflate(opcode, buffer, with: &deflate!, allocator: ByteBufferAllocator())
            }
            switch action {
            case .deliver(let opcode, let buffer):
                require(buffer.readableBytes <= maxMessageBytes, "the client delivered \(buffer.readableBytes) bytes, past the limit")
                outcome.messages.append(opcode == .text ? .string(String(buffer: buffer)) : .data(Data(buffer.readableBytesView)))
            case .replyToClose:
                outcome.ending = .peerClose(accepted: true)
                return outcome
            case .fail(let code, _, _):
                outcome.ending = frame.opcode == .connectionClose ? .peerClose(accepted: false) : .failed(code.rawValue)
                return outcome
            case .closeHandshakeDone, .sendClose:
                require(false, "the client ended a handshake it did not start")
            case .none, .sendPong, .pongReceived, .inflate:
                break
            }
        }
        return outcome
    }
}
#endif
