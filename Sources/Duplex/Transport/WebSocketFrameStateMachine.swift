import DuplexSchema
import NIOCore
import NIOWebSocket
import Foundation

/// The client side of RFC 6455 for one connection, at the frame level: message reassembly,
/// UTF-8 validation, size limits, control frames and the close handshake.
///
/// A pure value: it is fed frames and requests, and returns what to do. The NIO channel handler
/// performs the actions; the unit tests check them with no I/O.
struct WebSocketFrameStateMachine {
    enum State: Equatable {
        /// Open: messages flow both ways.
        case open
        /// We sent a close frame and wait for the peer's.
        case closeSent
        /// The close handshake is done, or the connection failed; nothing more is sent.
        case closed
    }

    enum Action: Equatable {
        case none
        /// Hand a complete message to the application.
        case deliver(WebSocketMessage)
        /// Answer a ping.
        case sendPong(ByteBuffer)
        /// A pong arrived.
        case pongReceived([UInt8])
        /// The peer started the close handshake: send our close frame (echoing its code), then
        /// wait for the server to end the TCP connection. Report the peer's code and reason.
        case replyToClose(reply: WebSocketCloseCode?, peerCode: WebSocketCloseCode, reason: String)
        /// The peer answered our close frame: the handshake is done; close the TCP connection.
        case closeHandshakeDone(peerCode: WebSocketCloseCode, reason: String)
        /// The peer broke the protocol, and `error` says how: send a close frame with this code
        /// and reason (unless ours was already sent) and close the connection.
        case failConnection(WebSocketCloseCode, reason: String, error: WebSocketError, sendCloseFrame: Bool)
        /// Send our close frame (a close the application asked for).
        case sendClose(WebSocketCloseCode, reason: String)
        /// A complete compressed message (permessage-deflate): inflate it, within the message
        /// limit, then report with ``inflated(opcode:buffer:)`` or ``inflationFailed(tooLarge:)``.
        case inflate(opcode: WebSocketOpcode, buffer: ByteBuffer)
    }

    private(set) var state: State = .open
    let maxMessageBytes: Int
    /// Whether permessage-deflate was negotiated: then RSV1 on a message's first frame marks it
    /// compressed.
    let compressionNegotiated: Bool
    private var fragments: (opcode: WebSocketOpcode, buffer: ByteBuffer, compressed: Bool)?
    /// While an uncompressed text message arrives in fragments: its UTF-8 so far, so invalid
    /// text fails the connection at the fragment that makes it so (RFC 6455 section 8.1).
    private var fragmentText: UTF8Validator?

    init(maxMessageBytes: Int, compressionNegotiated: Bool = false) {
        self.maxMessageBytes = maxMessageBytes
        self.compressionNegotiated = compressionNegotiated
    }

    /// The application asks to close with `code` and `reason`.
    mutating func close(code: WebSocketCloseCode, reason: String) -> Action {
        guard state == .open else { return .none }
        state = .closeSent
        return .sendClose(code, reason: reason)
    }

    /// Whether data frames may be sent.
    var canSend: Bool { state == .open }

    /// A frame decoding error from the NIO decoder.
    mutating func decodingFailed(_ error: any Error) -> Action {
        switch error {
        case NIOWebSocketError.invalidFrameLength:
            return fail(.messageTooBig, "a frame is larger than \(maxMessageBytes) bytes", .messageTooBig)
        default:
            return fail(.protocolError, "a frame could not be decoded: \(error)", .protocolViolation)
        }
    }

    /// A frame arrived.
    mutating func received(_ frame: WebSocketFrame) -> Action {
        guard state != .closed else { return .none }
        guard frame.maskKey == nil else {
            return fail(.protocolError, "the server sent a masked frame", .protocolViolation)
        }
        guard frame.rsv2 == false, frame.rsv3 == false else {
            return fail(.protocolError, "the server set reserved bits with no extension negotiated", .protocolViolation)
        }
        // RSV1 marks a compressed message: on its first frame only, and only once negotiated.
        if frame.rsv1 {
            guard compressionNegotiated else {
                return fail(.protocolError, "the server set reserved bits with no extension negotiated", .protocolViolation)
            }
            guard frame.opcode == .text || frame.opcode == .binary else {
                return fail(.protocolError, "the server set RSV1 on a \(frame.opcode == .continuation ? "continuation" : "control") frame", .protocolViolation)
            }
        }
        switch frame.opcode {
        case .ping, .pong, .connectionClose:
            guard frame.fin, frame.data.readableBytes <= 125 else {
                return fail(.protocolError, "a control frame was fragmented or longer than 125 bytes", .protocolViolation)
            }
            return receivedControl(frame)
        case .text, .binary:
            guard fragments == nil else {
                return fail(.protocolError, "a new message began inside a fragmented one", .protocolViolation)
            }
            if frame.fin {
                guard frame.data.readableBytes <= maxMessageBytes else { return tooBig() }
                return complete(opcode: frame.opcode, buffer: frame.data, compressed: frame.rsv1)
            }
            guard frame.data.readableBytes <= maxMessageBytes else { return tooBig() }
            if frame.opcode == .text, !frame.rsv1 {
                var text = UTF8Validator()
                guard text.feed(frame.data.readableBytesView) else { return invalidText() }
                fragmentText = text
            }
            fragments = (frame.opcode, frame.data, frame.rsv1)
            return .none
        case .continuation:
            guard let (opcode, partial, compressed) = fragments else {
                return fail(.protocolError, "a continuation frame came with no message to continue", .protocolViolation)
            }
            guard partial.readableBytes + frame.data.readableBytes <= maxMessageBytes else { return tooBig() }
            if var text = fragmentText {
                fragmentText = nil
                guard text.feed(frame.data.readableBytesView), !frame.fin || text.isComplete else { return invalidText() }
                if !frame.fin { fragmentText = text }
            }
            var buffer = partial
            var data = frame.data
            buffer.writeBuffer(&data)
            if frame.fin {
                fragments = nil
                return complete(opcode: opcode, buffer: buffer, compressed: compressed)
            }
            fragments = (opcode, buffer, compressed)
            return .none
        default:
            return fail(.protocolError, "the server used reserved opcode \(frame.opcode)", .protocolViolation)
        }
    }

    /// The connection ended (TCP closed): nothing more is sent or received.
    mutating func channelClosed() {
        state = .closed
        fragments = nil
        fragmentText = nil
    }

    private mutating func receivedControl(_ frame: WebSocketFrame) -> Action {
        switch frame.opcode {
        case .ping:
            return state == .open ? .sendPong(frame.data) : .none
        case .pong:
            return .pongReceived(Array(frame.data.readableBytesView))
        default:
            return receivedClose(frame.data)
        }
    }

    private mutating func receivedClose(_ payload: ByteBuffer) -> Action {
        var payload = payload
        var peerCode = WebSocketCloseCode.noStatusReceived
        var reason = ""
        switch payload.readableBytes {
        case 0:
            break
        case 1:
            return fail(.protocolError, "a close frame had a 1-byte payload", .protocolViolation)
        default:
            let number = payload.readInteger(as: UInt16.self)!
            peerCode = WebSocketCloseCode(number)
            guard peerCode.isValidOnWire else {
                return fail(.protocolError, "the server sent close code \(number), which may not be sent", .protocolViolation)
            }
            guard let text = String(validating: payload.readableBytesView, as: UTF8.self) else {
                return fail(.invalidFramePayloadData, "the close reason is not valid UTF-8", .protocolViolation)
            }
            reason = text
        }
        switch state {
        case .open:
            state = .closed
            fragments = nil
            fragmentText = nil
            let reply: WebSocketCloseCode? = peerCode == .noStatusReceived ? nil : peerCode
            return .replyToClose(reply: reply, peerCode: peerCode, reason: reason)
        case .closeSent:
            state = .closed
            return .closeHandshakeDone(peerCode: peerCode, reason: reason)
        case .closed:
            return .none
        }
    }

    /// A compressed message, inflated within the limit.
    mutating func inflated(opcode: WebSocketOpcode, buffer: ByteBuffer) -> Action {
        guard state != .closed else { return .none }
        return message(opcode: opcode, buffer: buffer)
    }

    /// A compressed message could not be inflated: past the limit (1009), or not deflate (1007).
    mutating func inflationFailed(tooLarge: Bool) -> Action {
        tooLarge
            ? fail(.messageTooBig, "a compressed message inflates past \(maxMessageBytes) bytes", .messageTooBig)
            : fail(.invalidFramePayloadData, "a compressed message could not be inflated", .protocolViolation)
    }

    private mutating func complete(opcode: WebSocketOpcode, buffer: ByteBuffer, compressed: Bool) -> Action {
        compressed ? .inflate(opcode: opcode, buffer: buffer) : message(opcode: opcode, buffer: buffer)
    }

    private mutating func message(opcode: WebSocketOpcode, buffer: ByteBuffer) -> Action {
        if opcode == .text {
            guard let text = String(validating: buffer.readableBytesView, as: UTF8.self) else { return invalidText() }
            return .deliver(.string(text))
        }
        return .deliver(.data(Data(buffer.readableBytesView)))
    }

    private mutating func invalidText() -> Action {
        fail(.invalidFramePayloadData, "a text message is not valid UTF-8", .protocolViolation)
    }

    private mutating func tooBig() -> Action {
        fail(.messageTooBig, "a message is larger than \(maxMessageBytes) bytes", .messageTooBig)
    }

    private mutating func fail(_ code: WebSocketCloseCode, _ reason: String, _ errorCode: WebSocketError.Code) -> Action {
        let previous = state
        state = .closed
        fragments = nil
        fragmentText = nil
        guard previous != .closed else { return .none }
        return .failConnection(code, reason: reason, error: WebSocketError(errorCode, reason, closeCode: code), sendCloseFrame: previous == .open)
    }
}
