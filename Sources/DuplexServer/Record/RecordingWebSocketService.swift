import Duplex
import DuplexSchema
import Foundation
import Logging
import NIOCore
import NIOWebSocket

/// Forwards one WebSocket connection to the upstream with the Duplex client, and records the
/// session: on the connection's event loop, in the order things happen there.
///
/// The client's messages are held until the upstream's handshake is done (then the session
/// begins, with the subprotocol and extensions the upstream agreed to), and each is held until the upstream took
/// the one before it, so a client that sends faster than the upstream takes is held back by TCP.
/// An upstream that cannot be reached closes the client's connection with 1014 (bad gateway).
final class RecordingWebSocketService: EventLoopWebSocketService {
    var connectionInfo: ConnectionInfo { .init(kind: .webSocket, route: "record") }

    private let upstream: WebSocket
    private let session: Cassette.Session
    private let recorder: CassetteRecorder
    private let logger: Logger
    private let start = ContinuousClock.now
    private var recording: SessionRecording?
    private var handler: EventLoopWebSocketHandler?
    private var context: ChannelHandlerContext?
    /// The task that forwards the upstream's messages, waiting for the client to read.
    private var writableWaiter: CheckedContinuation<Void, Never>?

    init(upstream: WebSocket, session: Cassette.Session, recorder: CassetteRecorder, logger: Logger) {
        self.upstream = upstream
        self.session = session
        self.recorder = recorder
        self.logger = logger
    }

    func start(handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        self.handler = handler
        self.context = context
        handler.hold()
        let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let loop = context.eventLoop
        let upstream = self.upstream
        let events = upstream.events
        // Reads the upstream's events until it closes, or its stream ends with the connection.
        Task {
            do {
                try await upstream.connect()
            } catch {
                loop.execute { bound.value.unreachable(error) }
                return
            }
            let chosen: String? =
                if case .connected(let subprotocol) = upstream.state { subprotocol } else { nil }
            let extensions = upstream.negotiatedExtensions
            loop.execute { bound.value.connected(subprotocol: chosen, extensions: extensions) }
            for await event in events {
                switch event {
                case .message(let message):
                    // A client that does not read holds the upstream back: this stops reading
                    // its events until the client's channel is writable again, so the Duplex
                    // client's bounded stream fills and it stops reading the upstream's socket.
                    let writable = (try? await loop.submit { bound.value.fromUpstream(message) }.get()) ?? true
                    if !writable {
                        await withCheckedContinuation { continuation in
                            loop.execute { bound.value.resumeWhenWritable(continuation) }
                        }
                    }
                case .disconnected(let code, let reason):
                    loop.execute { bound.value.upstreamClosed(code: code, reason: reason ?? "") }
                    return
                case .connected, .error:
                    break
                }
            }
        }
    }

    private func unreachable(_ error: any Error) {
        logger.warning("recording: the upstream could not be reached", metadata: ["path": "\(session.path)", "error": "\(error)"])
        guard let handler, let context else { return }
        handler.close(code: .badGateway, reason: "the recorded server could not be reached", context: context)
    }

    private func connected(subprotocol: String?, extensions: String?) {
        var session = self.session
        session.subprotocol = subprotocol
        session.extensions = extensions
        recording = recorder.begin(session, at: start)
        guard let handler, let context else { return }
        handler.release(context: context)
    }

    /// Sends the upstream's message to the client, and says whether the channel can take more.
    private func fromUpstream(_ message: WebSocketMessage) -> Bool {
        guard let handler, let context else { return true }
        defer { handler.flush(context: context) }
        switch message {
        case .string(let text):
            recording?.record(.message(.server, .text(text)))
            handler.send(ByteBuffer(string: text), opcode: .text, context: context)
        case .data(let data):
            recording?.record(.message(.server, .binary(data)))
            handler.send(ByteBuffer(bytes: data), opcode: .binary, context: context)
        }
        return context.channel.isWritable
    }

    /// Resumes `continuation` once the client's channel is writable, or the connection ended.
    private func resumeWhenWritable(_ continuation: CheckedContinuation<Void, Never>) {
        guard let context, !context.channel.isWritable else {
            continuation.resume()
            return
        }
        writableWaiter = continuation
    }

    func writable() {
        writableWaiter?.resume()
        writableWaiter = nil
    }

    private func upstreamClosed(code: WebSocketCloseCode?, reason: String) {
        if let code {
            recording?.record(.close(.server, code: code.rawValue, reason: reason))
        } else {
            recording?.record(.disconnect(.server))
        }
        guard let handler, let context else { return }
        if let code {
            handler.close(code: code, reason: reason, context: context)
        } else {
            context.close(promise: nil)
        }
    }

    func receive(_ message: consuming ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        let forwarded: WebSocketMessage
        if opcode == .text {
            let text = String(buffer: message)
            recording?.record(.message(.client, .text(text)))
            forwarded = .string(text)
        } else {
            let data = Data(message.readableBytesView)
            recording?.record(.message(.client, .binary(data)))
            forwarded = .data(data)
        }
        // One message in flight upstream: the next is read once this one is taken.
        handler.hold()
        let bound = NIOLoopBound((handler, context), eventLoop: context.eventLoop)
        let loop = context.eventLoop
        let upstream = self.upstream
        Task {
            // A failure means the upstream is gone: its close reaches the client through the
            // task that reads its events.
            try? await upstream.send(forwarded)
            loop.execute {
                let (handler, context) = bound.value
                handler.release(context: context)
            }
        }
    }

    func peerClosed(code: WebSocketCloseCode?, reason: String) {
        recording?.record(.close(.client, code: code?.rawValue, reason: reason))
        let upstream = self.upstream
        Task { await upstream.disconnect(code: code ?? .normalClosure, reason: reason) }
    }

    func stall(for duration: Duration) {}

    func closing() {}

    func end() {
        // A client that went without a close frame; after a close, nothing more is recorded.
        recording?.record(.disconnect(.client))
        handler = nil
        context = nil
        writable()
        let upstream = self.upstream
        Task { await upstream.terminate() }
    }
}
