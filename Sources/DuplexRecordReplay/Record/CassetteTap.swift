import DuplexSchema
import DuplexScripted

/// Records a proxied session into a cassette: what each side sent (a WebSocket's messages, an SSE
/// upstream's events), as it arrived, and how the session ended (the recorder's tap on its proxy
/// routes).
final class CassetteTap: ProxySessionTap {
    private let recording: SessionRecording

    init(_ recording: SessionRecording) {
        self.recording = recording
    }

    func message(_ message: ScriptedMessage, from side: ProxySide) {
        switch message {
        case .text(let text): recording.record(.message(Self.party(side), .text(text)))
        case .binary(let data): recording.record(.message(Self.party(side), .binary(data)))
        }
    }

    func event(_ event: ServerSentEvent) {
        recording.record(.event(event))
    }

    func closed(by side: ProxySide, code: UInt16?, reason: String) {
        recording.record(.close(Self.party(side), code: code, reason: reason))
    }

    func dropped(by side: ProxySide) {
        recording.record(.disconnect(Self.party(side)))
    }

    private static func party(_ side: ProxySide) -> Cassette.Side {
        side == .client ? .client : .server
    }
}
