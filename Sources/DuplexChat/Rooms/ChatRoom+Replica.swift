import DuplexHost
import DequeModule
import DuplexSchema
import DuplexWire
import Foundation
import NIOConcurrencyHelpers
import OrderedCollections

/// A replica: a room whose events a shared store numbers (the PostgreSQL store), applied here in
/// seq order.
extension ChatRoom {
    /// Applies events a shared store numbered, in seq order: events at or below the latest seq
    /// were applied before and are skipped. Returns false at a gap (an event past the next seq),
    /// leaving the events from it unapplied: the caller fetches the missing ones first.
    ///
    /// A `left` event for a connection still subscribed here (a newer connection of the member
    /// replaced it on another node, or its node's lease ran out) closes that connection.
    @discardableResult
    package func apply(_ events: some Sequence<RoomEvent>) -> Bool {
        var contiguous = true
        var ended: [(RoomSubscriber, replaced: Bool)] = []
        var woken: [CheckedContinuation<Bool, Never>] = []
        let claimed = state.withLockedValue { state -> Bool in
            applying: for event in events {
                switch state.ledger.apply(event) {
                case .old: continue
                case .gap:
                    contiguous = false
                    break applying
                case .applied(let ending):
                    if let ending, let slot = state.slots.removeValue(forKey: ending.id) {
                        ended.append((slot.subscriber, ending.replaced))
                    }
                    Self.enqueue(event, in: &state)
                }
            }
            for (id, waiter) in state.seqWaiters where waiter.seq <= state.ledger.latestSeq {
                state.seqWaiters.removeValue(forKey: id)
                woken.append(waiter.continuation)
            }
            return Self.claimFanOut(&state)
        }
        for (subscriber, replaced) in ended {
            if replaced { subscriber.onReplaced() } else { subscriber.onOverflow() }
        }
        if claimed, Self.gathering?.add(self) != true { fanOut() }
        for continuation in woken { continuation.resume(returning: true) }
        return contiguous
    }

    /// The rooms whose events wait for the end of an ``applyingTogether(_:)``.
    package final class Gathering: Sendable {
        private let rooms = NIOLockedValueBox<(rooms: [ChatRoom], ended: Bool)>(([], false))

        /// Keeps `room`'s fan-out for the end of the scope; false once the scope ended (a task
        /// started inside it inherits the task-local and may apply events after it): the caller
        /// delivers them itself then.
        func add(_ room: ChatRoom) -> Bool {
            rooms.withLockedValue { gathered in
                guard !gathered.ended else { return false }
                gathered.rooms.append(room)
                return true
            }
        }

        /// Whether the scope ended.
        var ended: Bool { rooms.withLockedValue { $0.ended } }

        /// The rooms gathered; ends the scope.
        func end() -> [ChatRoom] {
            rooms.withLockedValue { gathered in
                gathered.ended = true
                defer { gathered.rooms = [] }
                return gathered.rooms
            }
        }
    }

    /// Set inside ``applyingTogether(_:)``.
    @TaskLocal package static var gathering: Gathering?

    /// Runs `body`, in which the events replicas apply (``apply(_:)``) are numbered and kept at
    /// once but not delivered; then delivers each room's, in order, every subscriber getting them
    /// together: a batch of messages a commit or a notification brings costs each member one
    /// write, not one per message. Used around what one commit or one notification applies.
    ///
    /// A room's fan-out claimed in the scope is always delivered: at its end, or by whoever
    /// applies after it ended (``Gathering/add(_:)``).
    package static func applyingTogether<Result>(_ body: () throws -> Result) rethrows -> Result {
        if let current = gathering, !current.ended { return try body() }
        let gathering = Gathering()
        // A room that claimed its fan-out must deliver it, whatever `body` does.
        defer { for room in gathering.end() { room.fanOut() } }
        return try $gathering.withValue(gathering) { try body() }
    }

    /// Starts the history again at `latestSeq` with `events`, when the events between the
    /// replica's latest seq and the store's oldest kept one are gone: every subscriber is closed
    /// as too far behind (1013), so that it resumes with `since` and learns what is kept.
    package func restart(at latestSeq: Int, with events: [RoomEvent]) {
        let (dropped, woken) = state.withLockedValue { state -> ([RoomSubscriber], [CheckedContinuation<Bool, Never>]) in
            let ended = state.ledger.restart(at: latestSeq, with: events)
            let dropped = ended.compactMap { state.slots[$0]?.subscriber }
            state.slots = [:]
            let applied = state.ledger.latestSeq
            let woken = state.seqWaiters.values.filter { $0.seq <= applied }.map(\.continuation)
            state.seqWaiters = state.seqWaiters.filter { $0.value.seq > applied }
            return (dropped, woken)
        }
        for subscriber in dropped { subscriber.onOverflow() }
        for continuation in woken { continuation.resume(returning: true) }
    }

    /// Waits until the event numbered `seq` has been applied; returns false when `timeout`
    /// passes first, or the task is cancelled.
    package func waitUntilApplied(_ seq: Int, timeout: Duration) async -> Bool {
        // The usual case on the say path: the node applied its own event already.
        if latestSeq >= seq { return true }
        let applied = try? await withDeadline(timeout, orThrow: { CancellationError() }) { await self.waitUntilApplied(seq) }
        return applied ?? false
    }

    private func waitUntilApplied(_ seq: Int) async -> Bool {
        let id = state.withLockedValue { state in
            state.nextWaiterID += 1
            return state.nextWaiterID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let done = state.withLockedValue { state in
                    if state.ledger.latestSeq >= seq || Task.isCancelled { return true }
                    state.seqWaiters[id] = (seq, continuation)
                    return false
                }
                if done { continuation.resume(returning: state.withLockedValue { $0.ledger.latestSeq >= seq }) }
            }
        } onCancel: {
            state.withLockedValue { $0.seqWaiters.removeValue(forKey: id) }?.continuation.resume(returning: false)
        }
    }
}
