import Duplex
import DuplexHost
import DuplexSchema
import Foundation
import NIOCore
import NIOWebSocket

/// What a proxied connection sends: messages either way, journaled on the leg they leave by, and
/// the ends a rule makes.
extension ProxyWebSocketService {
    /// Sends `message` the way `direction` goes (to the client in `frames` frames), journaled on
    /// the leg it leaves by.
    func deliver(_ message: ScriptedMessage, _ direction: ProxyDirection, as action: String, frames: Int = 1) {
        switch direction {
        case .toClient:
            note(message, leg: .client, direction: .out, action: frames > 1 ? "\(action) in \(frames) frames" : action)
            guard let handler, let context else { return }
            switch (message, frames) {
            case (.text(let text), 1): handler.send(ByteBuffer(string: text), opcode: .text, context: context)
            case (.binary(let data), 1): handler.send(ByteBuffer(bytes: data), opcode: .binary, context: context)
            case (.text(let text), _): handler.writeFragments(Array(text.utf8), opcode: .text, frames: frames, context: context)
            case (.binary(let data), _): handler.writeFragments(Array(data), opcode: .binary, frames: frames, context: context)
            }
            flushClientSoon()
        case .toUpstream:
            note(message, leg: .upstream, direction: .out, action: action)
            let forwarded: WebSocketMessage
            switch message {
            case .text(let text): forwarded = .string(text)
            case .binary(let data): forwarded = .data(data)
            }
            // Above its high watermark, the client is read no more until it drains. (Written to
            // an upstream that is gone, it is lost with it, and its end reaches the client.)
            if upstream.write(forwarded) { upstreamFull = true }
        }
    }

    /// Flushes what was written to the client once this event-loop turn is done with the reads
    /// at hand: the upstream's messages of one read go to the client in one write.
    private func flushClientSoon() {
        guard !clientFlushQueued else { return }
        clientFlushQueued = true
        let bound = NIOLoopBound(self, eventLoop: loop)
        loop.execute {
            let service = bound.value
            service.clientFlushQueued = false
            guard let handler = service.handler, let context = service.context else { return }
            handler.flush(context: context)
        }
    }

    /// A rule's `fault`: a frame the client must reject.
    func sendClient(_ fault: FrameFault) {
        journal?.append(
            .init(
                connection: connection, path: path, direction: .out, kind: .fault, data: fault.rawValue, code: Int(fault.expectedCloseCode),
                leg: .client))
        guard let handler, let context else { return }
        handler.write(fault, context: context)
    }

    /// A rule's `close`: the client's connection with `code`, the upstream's normally.
    func closeBoth(code: UInt16, reason: String) {
        finished = true
        journal?.append(.init(connection: connection, path: path, direction: .out, kind: .close, code: Int(code), reason: reason, leg: .client))
        journal?.append(.init(connection: connection, path: path, direction: .out, kind: .close, code: 1000, leg: .upstream))
        upstream.close(code: .normalClosure, reason: "")
        guard let handler, let context else { return }
        handler.close(code: WebSocketCloseCode(rawValue: code), reason: reason, context: context)
    }

    /// A rule's `drop`: both connections end with no close frame.
    func dropBoth() {
        finished = true
        journal?.append(.init(connection: connection, path: path, direction: .out, kind: .drop, leg: .client))
        journal?.append(.init(connection: connection, path: path, direction: .out, kind: .drop, leg: .upstream))
        upstream.abort()
        guard let handler, let context else { return }
        handler.drop(context: context)
    }

    var isWritable: Bool {
        context?.channel.isWritable ?? true
    }

    func note(_ message: ScriptedMessage, leg: ScriptJournal.Entry.Leg, direction: ScriptJournal.Entry.Direction, action: String) {
        let (kind, data): (ScriptJournal.Entry.Kind, String) =
            switch message {
            case .text(let text): (.text, text)
            case .binary(let bytes): (.binary, bytes.base64EncodedString())
            }
        journal?.append(.init(connection: connection, path: path, direction: direction, kind: kind, data: data, leg: leg, action: action))
    }
}
