import DuplexHost
import Foundation

/// The position of an event in a room's SSE stream, as its `id`: `EPOCH:SEQ`.
package struct RoomStreamID: CustomStringConvertible, Equatable {
    package var epoch: String?
    package var seq: Int

    package init(epoch: String?, seq: Int) {
        self.epoch = epoch
        self.seq = seq
    }

    /// Parses `EPOCH:SEQ`, or a bare `SEQ` (from before epochs: the current epoch is assumed).
    package init?(_ text: String) {
        if let colon = text.lastIndex(of: ":") {
            guard let seq = Int(text[text.index(after: colon)...]), seq >= 0 else { return nil }
            self.init(epoch: String(text[..<colon]), seq: seq)
        } else {
            guard let seq = Int(text), seq >= 0 else { return nil }
            self.init(epoch: nil, seq: seq)
        }
    }

    package var description: String { epoch.map { "\($0):\(seq)" } ?? String(seq) }
}

/// `bytes` random bytes from the system's generator, as base64url without padding (a multiple
/// of 3 bytes has none): for epochs and resume tokens.
package func randomBase64URL(bytes count: Int) -> String {
    var generator = SystemRandomNumberGenerator()
    let bytes = (0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) }
    return Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
}
