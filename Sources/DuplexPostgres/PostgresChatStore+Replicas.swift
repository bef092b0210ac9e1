import DuplexChat
import DuplexSchema
import Foundation
import Logging
import NIOConcurrencyHelpers
import PostgresNIO

/// The local replicas of the rooms: loaded on first use, caught up from the events table.
extension PostgresChatStore {
    /// The local replica of a room, loaded from the database (and the room created there) when
    /// this server holds none.
    func replica(_ name: String) async throws -> ChatRoom {
        let held: Replica = try state.withLockedValue { state in
            switch state.replicas[name] {
            case .loaded(let room):
                return .loaded(room)
            case .loading(let task):
                return .loading(task)
            case nil:
                if state.replicas.count >= maxRooms {
                    let idle = state.replicas.compactMap { entry -> (String, ContinuousClock.Instant)? in
                        guard case .loaded(let room) = entry.value, let since = room.idleSince else { return nil }
                        return (entry.key, since)
                    }
                    guard let oldest = idle.min(by: { $0.1 < $1.1 }), case .loaded(let room) = state.replicas[oldest.0], room.evictIfEmpty() else {
                        throw ChatStoreRefusal.roomLimit
                    }
                    state.replicas[oldest.0] = nil
                }
                // Shared by every caller that asks for the room meanwhile; ends when the load does
                // (each query has the store's deadline).
                let task = Task { try await self.load(name) }
                state.replicas[name] = .loading(task)
                return .loading(task)
            }
        }
        let task: Task<ChatRoom, any Error>
        switch held {
        case .loaded(let room): return room
        case .loading(let loading): task = loading
        }
        do {
            let room = try await task.value
            state.withLockedValue { state in
                if case .loading = state.replicas[name] { state.replicas[name] = .loaded(room) }
            }
            return room
        } catch {
            state.withLockedValue { state in
                if case .loading = state.replicas[name] { state.replicas[name] = nil }
            }
            throw error
        }
    }

    /// Drops a replica whose room the database no longer has (the database was reset or
    /// restored from an older backup): its subscribers are closed (1013), and their rejoin
    /// creates the room again, in a new epoch, so that clients learn the history is gone.
    func forget(_ room: ChatRoom) {
        let held = state.withLockedValue { state in
            guard case .loaded(let held) = state.replicas[room.name], held === room else { return false }
            state.replicas[room.name] = nil
            return true
        }
        guard held else { return }
        logger.error(
            "the database no longer has this room (was it reset?); its members here rejoin in a new epoch", metadata: ["room": "\(room.name)"])
        room.restart(at: 0, with: [])
        _ = room.evictIfEmpty(force: true)
    }

    static func isMissingRoom(_ error: any Error) -> Bool {
        String(describing: error).contains("duplex: no room")
    }

    func loadedReplica(_ name: String) -> ChatRoom? {
        state.withLockedValue { state in
            if case .loaded(let room) = state.replicas[name] { room } else { nil }
        }
    }

    var loadedReplicas: [ChatRoom] {
        state.withLockedValue { state in
            state.replicas.values.compactMap { if case .loaded(let room) = $0 { room } else { nil } }
        }
    }

    func load(_ name: String) async throws -> ChatRoom {
        let (epoch, latestSeq, events) = try await withDeadline("loading room \(name)") {
            // On one connection: the SELECT is answered after the INSERT's commit. On another, it
            // could run before that commit and not see the room this call created.
            let found: (String, Int)? = try await self.client.withConnection { connection in
                try await connection.execute(
                    "INSERT INTO duplex_rooms (room, epoch) VALUES (\(name), \(ChatRoom.makeEpoch())) ON CONFLICT (room) DO NOTHING",
                    logger: self.logger
                )
                var found: (String, Int)?
                for try await row in try await connection.query(
                    "SELECT epoch, latest_seq FROM duplex_rooms WHERE room = \(name)", logger: self.logger
                ).decode((String, Int).self) {
                    found = row
                }
                return found
            }
            guard let (epoch, latestSeq) = found else { throw ChatStoreUnavailable(description: "room \(name) vanished while loading") }
            let events = try await self.fetch(name, after: max(latestSeq - self.historyLimit, 0), epoch: epoch, limit: max(self.historyLimit, 1))
            return (epoch, latestSeq, events)
        }
        let room = ChatRoom(
            replicaOf: name,
            epoch: epoch,
            latestSeq: latestSeq,
            history: events.filter { $0.seq <= latestSeq },
            historyLimit: historyLimit,
            historyBytesLimit: historyBytesLimit,
            budget: budget
        )
        // Events committed while it loaded arrive by notification, or by this catch-up.
        requestCatchUp(name)
        return room
    }

    /// The events of a room after `seq`, in order.
    func fetch(_ room: String, after seq: Int, epoch: String, limit: Int) async throws -> [RoomEvent] {
        let rows = try await client.query(
            "SELECT seq, type, json, cause FROM duplex_events WHERE room = \(room) AND seq > \(seq) ORDER BY seq LIMIT \(limit)",
            logger: logger
        )
        var events: [RoomEvent] = []
        for try await (seq, type, json, cause) in rows.decode((Int, String, String, String?).self) {
            events.append(Self.event(seq: seq, type: type, json: json, cause: cause, epoch: epoch))
        }
        return events
    }

    static func event(seq: Int, type: String, json: String, cause: String?, epoch: String) -> RoomEvent {
        var departure: RoomEvent.Departure?
        if type == "left", let cause, !cause.isEmpty,
            case .left(let presence)? = try? ChatServerFrame.decode(Data(json.utf8))
        {
            departure = .init(session: presence.session, replaced: cause == "replaced")
        }
        return RoomEvent(seq: seq, type: type, json: json, epoch: epoch, departure: departure)
    }

    /// Brings a replica up to the room's latest seq from `duplex_events`; one catch-up per room
    /// at a time, and one more when asked again meanwhile.
    func requestCatchUp(_ name: String) {
        let start = state.withLockedValue { state in
            if state.catchingUp[name] != nil {
                state.catchingUp[name] = true
                return false
            }
            state.catchingUp[name] = false
            return true
        }
        guard start else { return }
        // Ends once no catch-up was asked for during the last one (each query has the store's
        // deadline).
        Task {
            while true {
                do {
                    try await self.catchUp(name)
                } catch {
                    logger.warning(
                        "could not catch up a room; the next heartbeat tries again",
                        metadata: ["room": "\(name)", "error": "\(Self.describe(error))"])
                }
                let again = state.withLockedValue { state in
                    if state.catchingUp[name] == true {
                        state.catchingUp[name] = false
                        return true
                    }
                    state.catchingUp[name] = nil
                    return false
                }
                if !again { return }
            }
        }
    }

    func catchUp(_ name: String) async throws {
        guard let room = loadedReplica(name) else { return }
        let batch = 500
        while true {
            let after = room.latestSeq
            let events = try await withDeadline("catching up room \(name)") {
                try await self.fetch(name, after: after, epoch: room.epoch, limit: batch)
            }
            guard let first = events.first else { return }
            if first.seq > after + 1 {
                // The events in between were trimmed from the table: the subscribers here cannot
                // get them. They are closed (1013) and resume from what is kept.
                logger.warning(
                    "missed events are no longer kept; closing the room's subscribers here",
                    metadata: ["room": "\(name)", "from": "\(after + 1)", "to": "\(first.seq - 1)"])
                room.restart(at: events.last?.seq ?? after, with: Array(events.suffix(historyLimit)))
            } else {
                room.apply(events)
            }
            state.withLockedValue { $0.caughtUpEvents += events.count }
            metrics.caughtUp(events.count)
            if events.count < batch { return }
        }
    }
}
