import DuplexHost
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
///
/// Nothing the client did is lost to timing: a client that sends and closes before the upstream
/// answered has its messages and its close recorded (the session then begins at its close,
/// without the upstream's subprotocol), and forwarded to the upstream in order. Every operation
/// on the upstream (connect, each send, the close) runs in the order it was asked for.
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
    /// What happened before the session began (the upstream had not answered yet), with when.
    private var early: [(action: Cassette.Step.Action, at: ContinuousClock.Instant)] = []
    /// The upstream could not be reached: nothing is recorded.
    private var unreachableUpstream = false
    /// The last operation on the upstream: the next one waits for it.
    private var lastUpstreamOperation: Task<Void, Never>?

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
        // The first operation on the upstream: its handshake.
        let connecting = Task { await RecordingWebSocketService.connect(upstream, events: events, loop: loop, bound: bound) }
        lastUpstreamOperation = connecting
    }

    /// Connects to the upstream, then has its events read (until it closes, or its stream ends
    /// with the connection) by a task of their own, so that operations queued after the connect
    /// go on meanwhile.
    private static func connect(
        _ upstream: WebSocket, events: AsyncStream<WebSocketEvent>, loop: any EventLoop, bound: NIOLoopBound<RecordingWebSocketService>
    ) async {
        do {
            try await upstream.connect()
        } catch {
            loop.execute { bound.value.unreachable(error) }
            return
        }
        var chosen: String?
        if case .connected(let subprotocol) = upstream.state { chosen = subprotocol }
        let extensions = upstream.negotiatedExtensions
        let agreed = chosen
        loop.execute { bound.value.connected(subprotocol: agreed, extensions: extensions) }
        Task { await forward(events, loop: loop, bound: bound) }
    }

    /// Hands the upstream's messages to the client, until the upstream closes or is gone.
    private static func forward(
        _ events: AsyncStream<WebSocketEvent>, loop: any EventLoop, bound: NIOLoopBound<RecordingWebSocketService>
    ) async {
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

    /// Runs `operation` on the upstream once the operations asked for before it are done.
    private func onUpstream(_ operation: @escaping @Sendable (WebSocket) async -> Void) {
        let previous = lastUpstreamOperation
        let upstream = self.upstream
        let next = Task {
            await previous?.value
            await operation(upstream)
        }
        lastUpstreamOperation = next
    }

    /// Records `action` now, or keeps it with its time until the session begins.
    private func note(_ action: Cassette.Step.Action) {
        if let recording {
            recording.record(action)
        } else if !unreachableUpstream {
            early.append((action, .now))
        }
    }

    /// Begins the session (with what the upstream agreed to, when it answered) and records
    /// what was kept for it; once.
    private func beginRecording(subprotocol: String? = nil, extensions: String? = nil) {
        guard recording == nil, !unreachableUpstream else { return }
        var session = self.session
        session.subprotocol = subprotocol
        session.extensions = extensions
        let recording = recorder.begin(session, at: start)
        for step in early { recording.record(step.action, at: step.at) }
        early = []
        self.recording = recording
    }

    private func unreachable(_ error: any Error) {
        unreachableUpstream = recording == nil
        early = []
        logger.warning("recording: the upstream could not be reached", metadata: ["path": "\(session.path)", "error": "\(error)"])
        guard let handler, let context else { return }
        handler.close(code: .badGateway, reason: "the recorded server could not be reached", context: context)
    }

    private func connected(subprotocol: String?, extensions: String?) {
        beginRecording(subprotocol: subprotocol, extensions: extensions)
        guard let handler, let context else { return }
        handler.release(context: context)
    }

    /// Sends the upstream's message to the client, and says whether the channel can take more.
    private func fromUpstream(_ message: WebSocketMessage) -> Bool {
        guard let handler, let context else { return true }
        defer { handler.flush(context: context) }
        switch message {
        case .string(let text):
            note(.message(.server, .text(text)))
            handler.send(ByteBuffer(string: text), opcode: .text, context: context)
        case .data(let data):
            note(.message(.server, .binary(data)))
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
            note(.close(.server, code: code.rawValue, reason: reason))
        } else {
            note(.disconnect(.server))
        }
        guard let handler, let context else { return }
        if let code {
            handler.close(code: code, reason: reason, context: context)
        } else {
            context.close(promise: nil)
        }
    }

    func receive(_ message: consuming ByteBuffer, opcode: WebSocketOpcode, handler: EventLoopWebSocketHandler, context: ChannelHandlerContext) {
        let forwarded = fromClient(message, opcode: opcode)
        // One message in flight upstream: the next is read once this one is taken.
        handler.hold()
        let bound = NIOLoopBound((handler, context), eventLoop: context.eventLoop)
        let loop = context.eventLoop
        onUpstream { upstream in
            // A failure means the upstream is gone: its close reaches the client through the
            // task that reads its events.
            try? await upstream.send(forwarded)
            loop.execute {
                let (handler, context) = bound.value
                handler.release(context: context)
            }
        }
    }

    /// A message the client sent before its close, which the handler did not hand over while
    /// the upstream was busy: recorded and forwarded all the same.
    func discarded(_ message: ByteBuffer, opcode: WebSocketOpcode) {
        let forwarded = fromClient(message, opcode: opcode)
        onUpstream { upstream in try? await upstream.send(forwarded) }
    }

    /// Notes a message from the client, as the upstream will get it.
    private func fromClient(_ message: ByteBuffer, opcode: WebSocketOpcode) -> WebSocketMessage {
        if opcode == .text {
            let text = String(buffer: message)
            note(.message(.client, .text(text)))
            return .string(text)
        }
        let data = Data(message.readableBytesView)
        note(.message(.client, .binary(data)))
        return .data(data)
    }

    func peerClosed(code: WebSocketCloseCode?, reason: String) {
        note(.close(.client, code: code?.rawValue, reason: reason))
        // Recorded before the client hears the answer to its close.
        beginRecording()
        onUpstream { upstream in await upstream.disconnect(code: code ?? .normalClosure, reason: reason) }
    }

    func stall(for duration: Duration) {}

    func closing() {}

    func end() {
        // A client that went without a close frame; after a close, nothing more is recorded.
        note(.disconnect(.client))
        beginRecording()
        handler = nil
        context = nil
        writable()
        onUpstream { upstream in await upstream.terminate() }
    }
}
