package import DuplexHost
package import DuplexSchema
import Foundation
import HTTPTypes
import Logging
import NIOConcurrencyHelpers
import NIOCore

/// A validated request to join a chat room.
package struct ChatJoin: Sendable {
    package var room: String
    package var name: String
    package var since: Int?
    /// The resume token the member presented, if any.
    package var token: String?
    /// The epoch `since` counts in, if the member gave one.
    package var epoch: String?
}

extension ChatJoin {
    /// Validates `room`, and the `name`, `since`, `token` and `epoch` that `query` gives for a
    /// request's query parameter (the first value of each), within `limits`. It creates no room:
    /// rooms are created by the members and watchers who join them.
    package static func parse(room roomName: String, limits: ChatLimits, query: (String) -> String?) -> Result<ChatJoin, ProtocolRefusal> {
        do throws(ChatProtocolError) {
            try limits.validate(room: roomName)
            guard let name = query("name") else {
                throw ChatProtocolError(.invalidName, "the query parameter name is required, as in ?name=alice")
            }
            try limits.validate(name: name)
            var since: Int?
            if let text = query("since") {
                guard let value = Int(text), value >= 0 else {
                    throw ChatProtocolError(.invalidSince, "since must be a non-negative integer seq (got \(text.prefix(32).debugDescription))")
                }
                since = value
            }
            let token = query("token")
            if let token { try limits.validate(token: token) }
            let epoch = query("epoch")
            if let epoch { try limits.validate(epoch: epoch) }
            return .success(ChatJoin(room: roomName, name: name, since: since, token: token, epoch: epoch))
        } catch {
            return .failure(ProtocolRefusal(status: .badRequest, error: error))
        }
    }
}

extension ChannelTextWriter {
    /// Accepts room events, in order, to go out together: each one's shared frame (and shared
    /// compressed frame) when it has them; false when the member is too far behind or finished.
    /// Messages are written at once on the writer's loop; presence alone waits for the loop's
    /// batch (see ``offer(frame:textBytes:deflated:batched:)``).
    package func offer(_ events: [RoomEvent]) -> Bool {
        let frames = events.map { event in
            (frame: event.frame ?? ServerTextFrame.encode(event.json), textBytes: event.json.utf8.count, deflated: event.deflated)
        }
        return offer(frames, batched: !events.contains { $0.type == "message" })
    }
}
