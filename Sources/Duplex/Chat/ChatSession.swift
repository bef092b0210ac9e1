import DuplexSchema
import Foundation

/// The bookkeeping of a ``ChatClient``, across connections: the last seq seen (to resume with
/// `since=`), the messages sent but not acknowledged (to resend), and who is in the room. A pure
/// value: it takes frames and returns what to report and what to send, and is unit-tested alone.
struct ChatSession: Sendable {
    /// What the client does after a frame.
    struct Reaction: Sendable, Equatable {
        /// What to report, in order.
        var events: [ChatEvent] = []
        /// Frames to send, in order.
        var send: [ChatSay] = []
        /// The server refused the join: stop, do not reconnect.
        var refused: ChatErrorFrame?
    }

    let name: String
    /// The newest room event seen; nil before the first.
    private(set) var lastSeq: Int?
    /// Messages said and not yet acknowledged, oldest first.
    private(set) var pending: [ChatSay] = []
    /// The names present, sorted; as the last `welcome` said, kept up to date by live presence.
    private(set) var members: [String] = []
    /// The connection (its socket generation) that got the latest `welcome`: new messages are
    /// written on it, and only on it.
    private(set) var welcomedConnection: UInt64?
    /// How many `welcome`s arrived: 1 after the first join, more after reconnections.
    private(set) var joins = 0
    private var session: String?
    /// The resume token from the first `welcome`: presented on every rejoin, it makes the
    /// server treat the rejoining connection as this member (and resent messages as resends).
    private(set) var resumeToken: String?
    /// The room's epoch as the last `welcome` gave it: seqs count in it.
    private(set) var epoch: String?
    /// When the last room event seen happened.
    private var lastEventAt: Date?
    /// The `from/clientMessageId` of the last ``recentLimit`` messages reported, oldest first,
    /// and as a set: a message the server broadcasts again in a new epoch (a sender resent it
    /// because the old server died before its ack) is not reported twice.
    private var recent: (order: [String], keys: Set<String>) = ([], [])
    private static let recentLimit = 32_768
    private var latestSeqAtWelcome = 0
    private var counter = 0
    private let idPrefix: String

    init(name: String, idPrefix: String = String(UInt32.random(in: .min ... .max), radix: 36)) {
        self.name = name
        self.idPrefix = idPrefix
    }

    /// The URL to join with: `url` with `name=`, once an event was seen `since=`, and once
    /// welcomed `token=`.
    func joinURL(_ url: URL) -> URL {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return url }
        var items = (components.queryItems ?? []).filter { !["name", "since", "token"].contains($0.name) }
        items.append(URLQueryItem(name: "name", value: name))
        if let lastSeq {
            items.append(URLQueryItem(name: "since", value: String(lastSeq)))
            if let epoch { items.append(URLQueryItem(name: "epoch", value: epoch)) }
        }
        if let resumeToken { items.append(URLQueryItem(name: "token", value: resumeToken)) }
        components.queryItems = items
        // Query values may hold `+`, which servers read as a space.
        components.percentEncodedQuery = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        return components.url ?? url
    }

    /// Records a message to say, with a fresh client message id.
    mutating func say(_ text: String) -> ChatSay {
        counter += 1
        let say = ChatSay(clientMessageID: "\(idPrefix)-\(counter)", text: text)
        pending.append(say)
        return say
    }

    /// A frame arrived on `connection` (the socket generation that carried it).
    mutating func received(_ frame: ChatServerFrame, on connection: UInt64) -> Reaction {
        var reaction = Reaction()
        // Once a connection is welcomed, frames still arriving from an older one are stale: a
        // seq from a lost epoch would corrupt the position in the new one, and an ack from a
        // server that then lost its history would mark delivered a message the new one never
        // had. They are ignored; what they acknowledged is resent, and the server dedupes it.
        if let welcomed = welcomedConnection, connection < welcomed { return reaction }
        switch frame {
        case .welcome(let welcome):
            welcomedConnection = connection
            joins += 1
            session = welcome.session
            if let token = welcome.resumeToken { resumeToken = token }
            members = welcome.members.sorted()
            latestSeqAtWelcome = welcome.latestSeq
            let previousEpoch = epoch
            epoch = welcome.epoch
            if lastSeq != nil, let previousEpoch, welcome.recovered == false || (welcome.epoch != nil && welcome.epoch != previousEpoch) {
                // The seqs seen count in a history the server no longer has: start over from the
                // start of the new epoch (the server sends what it keeps of it), and say so.
                lastSeq = 0
                reaction.events.append(.historyReset(previousEpoch: previousEpoch, missedAfter: lastEventAt))
            } else if let lastSeq, lastSeq < welcome.latestSeq {
                // The server replays events after `since` that it still keeps; older ones are gone.
                let firstKept = welcome.oldestSeq ?? (welcome.latestSeq + 1)
                if firstKept > lastSeq + 1 {
                    reaction.events.append(.missed((lastSeq + 1)...(firstKept - 1)))
                }
            }
            reaction.events.append(.welcome(welcome, resumed: joins > 1))
            // Resent messages the server already has get a duplicate ack and no second broadcast.
            reaction.send = pending
        case .message(let message):
            guard isNew(message.seq) else { break }
            lastEventAt = message.sentAt
            guard remember("\(message.from)/\(message.clientMessageID)") else { break }
            reaction.events.append(.message(message))
        case .joined(let presence):
            guard isNew(presence.seq) else { break }
            lastEventAt = presence.at
            // Names are unique in a room. A server that reads the members apart from the seq (the
            // PostgreSQL store) may list a member whose `joined` comes after the welcome.
            if presence.seq > latestSeqAtWelcome, presence.session != session, !members.contains(presence.name) {
                members.append(presence.name)
                members.sort()
            }
            reaction.events.append(.joined(presence))
        case .left(let presence):
            guard isNew(presence.seq) else { break }
            lastEventAt = presence.at
            if presence.seq > latestSeqAtWelcome, presence.session != session, let index = members.firstIndex(of: presence.name) {
                members.remove(at: index)
            }
            reaction.events.append(.left(presence))
        case .ack(let ack):
            guard let index = pending.firstIndex(where: { $0.clientMessageID == ack.clientMessageID }) else { break }
            pending.remove(at: index)
            reaction.events.append(.delivered(ack))
        case .error(let error):
            if welcomedConnection != connection {
                reaction.refused = error
            } else {
                if let id = error.clientMessageID, let index = pending.firstIndex(where: { $0.clientMessageID == id }) {
                    pending.remove(at: index)
                }
                reaction.events.append(.rejected(error))
            }
        }
        return reaction
    }

    /// Records a message key; false when it was reported already.
    private mutating func remember(_ key: String) -> Bool {
        guard recent.keys.insert(key).inserted else { return false }
        recent.order.append(key)
        if recent.order.count > Self.recentLimit {
            recent.keys.remove(recent.order.removeFirst())
        }
        return true
    }

    /// Whether a room event is new (not a replay of one already seen), recording its seq if so.
    private mutating func isNew(_ seq: Int) -> Bool {
        if let lastSeq, seq <= lastSeq { return false }
        lastSeq = seq
        return true
    }
}
