package import DuplexSchema
package import NIOCore
package import NIOWebSocket

/// RFC 6455 at the message level, for either end of a connection: the one protocol engine that
/// the client (`Duplex`) and the server (`DuplexServer`) both run.
///
/// A pure value, fed the frames ``WebSocketFrameParser`` reads and the requests of its
/// owner; it returns what to do (``Action``), and the channel handler on each side only carries
/// that out. What it does, for the ``Role`` it plays:
/// - masking: a server refuses an unmasked frame, a client a masked one (section 5.1);
/// - reserved bits with no extension, RSV1 anywhere but the first frame of a message (when
///   permessage-deflate is agreed, RFC 7692 section 6), and reserved opcodes are refused (5.2);
/// - fragments are reassembled, with control frames allowed between them; a continuation with
///   nothing to continue or a new message inside a fragmented one is refused (5.4);
/// - control frames that are fragmented or longer than 125 bytes are refused (5.5);
/// - a text message must be UTF-8, checked a fragment at a time so the connection fails at the
///   first fragment that makes it invalid (8.1);
/// - a message over `maxMessageBytes` fails with 1009 (10.4), whole, in fragments, or inflated;
/// - pings are answered with their payload, pongs reported (5.5.2, 5.5.3);
/// - the close handshake (5.5.1, 7): a peer's close is answered with its own code, a malformed
///   one (a 1-byte payload, a code that may not be sent, a reason that is not UTF-8) fails the
///   connection; after our close frame, messages in flight are still delivered and the peer's
///   close completes the handshake.
///
/// Every refusal is a ``Action/fail(_:reason:sendCloseFrame:)`` with the close code to send:
/// 1002 for a protocol error, 1007 for invalid data, 1009 for a message too big.
package struct WebSocketEngine: Sendable {
    /// Which end of the connection the engine plays.
    package enum Role: Sendable, Hashable, CustomStringConvertible {
        /// Masks what it sends; its peer (a server) must not mask.
        case client
        /// Requires every frame it receives to be masked.
        case server

        /// The name of the peer, for the reasons the engine gives.
        package var peer: String { self == .client ? "the server" : "the client" }

        package var description: String { self == .client ? "client" : "server" }
    }

    /// Where the connection is in its life.
    package enum State: Sendable, Equatable {
        /// Messages flow both ways.
        case open
        /// We sent a close frame and wait for the peer's.
        case closeSent
        /// The peer broke the protocol (the engine answered ``Action/fail(_:reason:sendCloseFrame:)``):
        /// nothing more is read, and the owner carries the failure out when it is ready
        /// (``failed()``). Until then it may still send messages (when `sending`: no close frame
        /// went yet), so that the answers to what was delivered before the bad frame go out
        /// before the close frame, as a strict peer expects.
        case failing(sending: Bool)
        /// The close handshake is done, or the connection failed: nothing more is sent.
        case closed
    }

    /// What the owner does next.
    package enum Action: Equatable {
        case none
        /// Hand a whole message to the application: text checked as UTF-8, within the limit.
        case deliver(WebSocketOpcode, ByteBuffer)
        /// A whole compressed message (permessage-deflate): inflate it within
        /// ``maxMessageBytes``, then report with ``inflated(_:_:)`` or ``inflationFailed(tooLarge:)``.
        case inflate(WebSocketOpcode, ByteBuffer)
        /// Answer a ping with this payload.
        case sendPong(ByteBuffer)
        /// A pong arrived with this payload.
        case pongReceived(ByteBuffer)
        /// The peer began the close handshake: send our close frame with `code` (the peer's own;
        /// nil for an empty close frame, when the peer gave none), then close the connection.
        /// `code` and `reason` are what the peer said.
        case replyToClose(code: WebSocketCloseCode?, reason: String)
        /// The peer answered our close frame with `code` (nil: none) and `reason`: the handshake
        /// is done.
        case closeHandshakeDone(code: WebSocketCloseCode?, reason: String)
        /// Send our close frame (a close the owner asked for) and wait for the peer's answer.
        case sendClose(WebSocketCloseCode, reason: String)
        /// The peer broke the protocol, as `reason` says: send a close frame with `code` when
        /// `sendCloseFrame` (not when ours went already), and close the connection.
        case fail(WebSocketCloseCode, reason: String, sendCloseFrame: Bool)
    }

    package let role: Role
    package let maxMessageBytes: Int
    /// Whether permessage-deflate was agreed: then RSV1 on a message's first frame marks it
    /// compressed.
    package let compressionNegotiated: Bool
    package private(set) var state: State = .open
    /// The message being reassembled from fragments.
    private var fragments: (opcode: WebSocketOpcode, buffer: ByteBuffer, compressed: Bool)?
    /// While an uncompressed text message arrives in fragments: its UTF-8 so far.
    private var fragmentText: UTF8Validator?

    package init(role: Role, maxMessageBytes: Int, compressionNegotiated: Bool = false) {
        self.role = role
        self.maxMessageBytes = maxMessageBytes
        self.compressionNegotiated = compressionNegotiated
    }

    /// Whether data frames may be sent.
    package var canSend: Bool {
        switch state {
        case .open, .failing(sending: true): true
        case .closeSent, .failing(sending: false), .closed: false
        }
    }

    /// Whether frames are still read: not once the connection is failing or closed.
    package var readsFrames: Bool {
        switch state {
        case .open, .closeSent: true
        case .failing, .closed: false
        }
    }

    // MARK: The owner's requests

    /// The owner closes with `code` and `reason`.
    package mutating func close(code: WebSocketCloseCode, reason: String) -> Action {
        guard state == .open else { return .none }
        state = .closeSent
        return .sendClose(code, reason: reason)
    }

    /// The owner carried out the failure (sent its close frame, closed the connection): nothing
    /// more is sent.
    package mutating func failed() {
        channelClosed()
    }

    /// The connection ended (TCP closed): nothing more is sent or received.
    package mutating func channelClosed() {
        state = .closed
        fragments = nil
        fragmentText = nil
    }

    // MARK: What arrives

    /// The frame parser refused what arrived (with NIO's decoder's errors): a frame longer than
    /// its limit (1009), or one it could not decode (1002).
    package mutating func decodingFailed(_ error: any Error) -> Action {
        switch error {
        case NIOWebSocketError.invalidFrameLength:
            fail(.messageTooBig, "a frame is longer than \(maxMessageBytes) bytes")
        case NIOWebSocketError.fragmentedControlFrame, NIOWebSocketError.multiByteControlFrameLength:
            fail(.protocolError, "\(role.peer) sent a fragmented control frame or one longer than 125 bytes")
        default:
            fail(.protocolError, "a frame could not be decoded: \(error)")
        }
    }

    /// A frame arrived.
    package mutating func received(_ frame: consuming WebSocketFrame) -> Action {
        guard readsFrames else { return .none }
        switch role {
        case .server where frame.maskKey == nil:
            return fail(.protocolError, "the client sent an unmasked frame")
        case .client where frame.maskKey != nil:
            return fail(.protocolError, "the server sent a masked frame")
        default:
            break
        }
        guard !frame.rsv2, !frame.rsv3, !frame.rsv1 || compressionNegotiated else {
            return fail(.protocolError, "\(role.peer) set reserved bits with no extension agreed")
        }
        if frame.rsv1, frame.opcode != .text, frame.opcode != .binary {
            return fail(.protocolError, "\(role.peer) set RSV1 on a frame that does not begin a message")
        }
        switch frame.opcode {
        case .ping, .pong, .connectionClose:
            guard frame.fin, frame.length <= 125 else {
                return fail(.protocolError, "\(role.peer) sent a fragmented control frame or one longer than 125 bytes")
            }
            return receivedControl(frame.opcode, Self.payload(of: &frame))
        case .text, .binary:
            guard fragments == nil else {
                return fail(.protocolError, "\(role.peer) began a new message inside a fragmented one")
            }
            guard frame.length <= maxMessageBytes else { return tooBig() }
            let data = Self.payload(of: &frame)
            if frame.fin {
                return complete(frame.opcode, data, compressed: frame.rsv1)
            }
            if frame.opcode == .text, !frame.rsv1 {
                var text = UTF8Validator()
                guard text.feed(data.readableBytesView) else { return invalidText() }
                fragmentText = text
            }
            fragments = (frame.opcode, data, frame.rsv1)
            return .none
        case .continuation:
            guard case (let opcode, var buffer, let compressed)? = fragments else {
                return fail(.protocolError, "\(role.peer) sent a continuation frame with no message to continue")
            }
            fragments = nil
            guard buffer.readableBytes + frame.length <= maxMessageBytes else { return tooBig() }
            var data = Self.payload(of: &frame)
            if var text = fragmentText {
                fragmentText = nil
                guard text.feed(data.readableBytesView), !frame.fin || text.isComplete else { return invalidText() }
                if !frame.fin { fragmentText = text }
            }
            buffer.writeBuffer(&data)
            if frame.fin {
                return complete(opcode, buffer, compressed: compressed)
            }
            fragments = (opcode, buffer, compressed)
            return .none
        default:
            return fail(.protocolError, "\(role.peer) used the reserved opcode \(frame.opcode)")
        }
    }

    /// A compressed message, inflated within the limit.
    package mutating func inflated(_ opcode: WebSocketOpcode, _ message: ByteBuffer) -> Action {
        guard readsFrames else { return .none }
        guard message.readableBytes <= maxMessageBytes else { return tooBig(inflated: true) }
        return deliver(opcode, message)
    }

    /// A compressed message could not be inflated: past the limit (1009), or not deflate (1007).
    package mutating func inflationFailed(tooLarge: Bool) -> Action {
        tooLarge ? tooBig(inflated: true) : fail(.invalidFramePayloadData, "a compressed message from \(role.peer) does not inflate")
    }

    // MARK: Close frames

    /// The payload of a close frame: `code` and `reason`, the reason cut at a character boundary
    /// to the 123 bytes a control frame has room for (section 5.5); empty when `code` is nil.
    package static func closePayload(_ code: WebSocketCloseCode?, reason: String, allocator: ByteBufferAllocator) -> ByteBuffer {
        guard let code else { return allocator.buffer(capacity: 0) }
        var length = 0
        let reason = reason.prefix { character in
            length += character.utf8.count
            return length <= 123
        }
        var payload = allocator.buffer(capacity: 2 + reason.utf8.count)
        payload.writeInteger(code.rawValue)
        payload.writeSubstring(reason)
        return payload
    }

    // MARK: Inside

    /// A frame's payload, unmasked. A client's is unmasked where it was read, eight bytes at a
    /// time, when nothing else holds that buffer (the last frame of a read: no copy, and the room
    /// in front of it takes the header of a frame that sends it on); otherwise it is copied out as
    /// it is unmasked, into a buffer with that room in front (``WebSocketFrameBytes``).
    private static func payload(of frame: inout WebSocketFrame) -> ByteBuffer {
        guard let key = frame.maskKey else { return frame.data }
        let offset = (frame.extensionData?.readableBytes ?? 0) % 4
        var data = frame.data
        // The frame lets go of its reference, so that the payload may be the buffer's only one.
        frame.data = emptyBuffer
        let unmaskedInPlace = data.modifyIfUniquelyOwned { (buffer: inout ByteBuffer) -> Bool in
            buffer.withUnsafeMutableReadableBytes { bytes in
                WebSocketFrameBytes.xor(UnsafeRawBufferPointer(bytes), into: bytes, key: key, offset: offset)
            }
            return true
        }
        if unmaskedInPlace == true { return data }
        return WebSocketFrameBytes.unmask(data, key: key, offset: offset, allocator: allocator)
    }

    private static let emptyBuffer = ByteBufferAllocator().buffer(capacity: 0)

    private static let allocator = ByteBufferAllocator()

    private mutating func receivedControl(_ opcode: WebSocketOpcode, _ payload: ByteBuffer) -> Action {
        switch opcode {
        case .ping:
            return state == .open ? .sendPong(payload) : .none
        case .pong:
            return .pongReceived(payload)
        default:
            return receivedClose(payload)
        }
    }

    private mutating func receivedClose(_ payload: ByteBuffer) -> Action {
        var payload = payload
        var code: WebSocketCloseCode?
        var reason = ""
        if payload.readableBytes == 1 {
            return fail(.protocolError, "\(role.peer) sent a close frame with a 1-byte payload")
        }
        if let number = payload.readInteger(as: UInt16.self) {
            code = WebSocketCloseCode(number)
            guard code!.isValidOnWire else {
                return fail(.protocolError, "\(role.peer) sent close code \(number), which may not be sent")
            }
            guard let text = String(validating: payload.readableBytesView, as: UTF8.self) else {
                return fail(.invalidFramePayloadData, "the close reason from \(role.peer) is not UTF-8")
            }
            reason = text
        }
        let previous = state
        channelClosed()
        return previous == .open ? .replyToClose(code: code, reason: reason) : .closeHandshakeDone(code: code, reason: reason)
    }

    private mutating func complete(_ opcode: WebSocketOpcode, _ message: ByteBuffer, compressed: Bool) -> Action {
        compressed ? .inflate(opcode, message) : deliver(opcode, message)
    }

    private mutating func deliver(_ opcode: WebSocketOpcode, _ message: ByteBuffer) -> Action {
        if opcode == .text, !message.readableBytesAreValidUTF8 { return invalidText() }
        return .deliver(opcode, message)
    }

    private mutating func invalidText() -> Action {
        fail(.invalidFramePayloadData, "a text message from \(role.peer) is not UTF-8")
    }

    private mutating func tooBig(inflated: Bool = false) -> Action {
        fail(.messageTooBig, "a message from \(role.peer) is larger than \(maxMessageBytes) bytes\(inflated ? " once inflated" : "")")
    }

    private mutating func fail(_ code: WebSocketCloseCode, _ reason: String) -> Action {
        guard readsFrames else { return .none }
        let sendCloseFrame = state == .open
        state = .failing(sending: sendCloseFrame)
        fragments = nil
        fragmentText = nil
        return .fail(code, reason: reason, sendCloseFrame: sendCloseFrame)
    }
}

extension ByteBuffer {
    /// Whether the readable bytes are well-formed UTF-8. ASCII, the usual case, is checked eight
    /// bytes at a time with no decoder; anything else goes to the standard library's.
    package var readableBytesAreValidUTF8: Bool {
        let ascii = withUnsafeReadableBytes { bytes -> Bool in
            var offset = 0
            while offset + 8 <= bytes.count {
                if bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 { return false }
                offset += 8
            }
            while offset < bytes.count {
                if bytes[offset] >= 0x80 { return false }
                offset += 1
            }
            return true
        }
        return ascii || String(validating: readableBytesView, as: UTF8.self) != nil
    }
}
