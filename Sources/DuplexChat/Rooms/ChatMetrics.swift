package import CoreMetrics
import NIOConcurrencyHelpers
package import DuplexHost

/// What the chat rooms count, in the server's metrics (``ServerMetrics/factory``): messages
/// recorded and resent, resumes, epoch changes, the PostgreSQL store's commits and catching up,
/// and at each scrape how many rooms there are and how much history they keep.
package final class ChatMetrics: Sendable {
    /// The chat rooms' counters, whichever store holds them.
    package struct Chat: Sendable {
        /// Messages recorded (numbered and kept), and resends answered as duplicates.
        let recorded: Counter
        let duplicates: Counter
        /// Joins with `since` whose history was all there, or was not.
        let resumesRecovered: Counter
        let resumesNotRecovered: Counter
        /// Joins with an `epoch` the room no longer has (history reset meanwhile).
        let epochChanges: Counter

        /// The store answered a message: recorded, or a resend of one it had.
        func answered(_ outcome: ChatRoom.SayResult) {
            switch outcome {
            case .accepted: recorded.increment()
            case .duplicate: duplicates.increment()
            }
        }

        /// A member joined: `recovered` says whether a resume (`since`) found its history (nil:
        /// not a resume); `epochChanged`, whether it asked for an epoch the room no longer has.
        func joined(recovered: Bool?, epochChanged: Bool) {
            switch recovered {
            case true?: resumesRecovered.increment()
            case false?: resumesNotRecovered.increment()
            case nil: break
            }
            if epochChanged { epochChanges.increment() }
        }
    }

    /// The PostgreSQL store's counters.
    package struct Store: Sendable {
        /// Each group commit's duration, and the messages in it.
        let commitDuration: CoreMetrics.Timer
        let commitMessages: Recorder
        /// Times the database connection was lost (and reconnecting began).
        package let reconnections: Counter
        /// Events read back from the table to catch a room up (after a gap, a reconnection).
        package let caughtUpEvents: Counter
        /// From the database sending a notification to this server applying its events.
        let notifyLag: CoreMetrics.Timer

        /// A group commit of `messages` took `duration` (failed ones included).
        package func committed(messages: Int, in duration: Duration) {
            commitDuration.recordNanoseconds(Self.nanoseconds(duration))
            commitMessages.record(messages)
        }

        /// The database connection was lost.
        package func lostConnection() {
            reconnections.increment()
        }

        /// `count` events were read back from the table to catch a room up.
        package func caughtUp(_ count: Int) {
            caughtUpEvents.increment(by: count)
        }

        /// A notification's events were applied `lag` after the database sent it.
        package func applied(lag: Duration) {
            notifyLag.recordNanoseconds(Self.nanoseconds(lag))
        }

        /// `duration` in nanoseconds, saturating at about 290 years.
        private static func nanoseconds(_ duration: Duration) -> Int64 {
            let (seconds, attoseconds) = duration.components
            guard seconds < 9_000_000_000 else { return 9_000_000_000 * 1_000_000_000 }
            return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        }
    }

    package let chat: Chat
    package let store: Store
    private let rooms: Gauge
    private let historyBytes: Gauge

    /// The chat metrics, made by `factory` (the server's, ``ServerMetrics/factory``).
    package init(factory: any MetricsFactory) {
        func resumes(_ recovered: String) -> Counter {
            Counter(label: "duplex_chat_resumes_total", dimensions: [("recovered", recovered)], factory: factory)
        }
        chat = Chat(
            recorded: Counter(label: "duplex_chat_messages_recorded_total", factory: factory),
            duplicates: Counter(label: "duplex_chat_duplicate_says_total", factory: factory),
            resumesRecovered: resumes("true"),
            resumesNotRecovered: resumes("false"),
            epochChanges: Counter(label: "duplex_chat_epoch_changes_total", factory: factory)
        )
        store = Store(
            commitDuration: CoreMetrics.Timer(label: "duplex_store_commit_seconds", preferredDisplayUnit: .seconds, factory: factory),
            commitMessages: Recorder(label: "duplex_store_commit_messages", factory: factory),
            reconnections: Counter(label: "duplex_store_reconnections_total", factory: factory),
            caughtUpEvents: Counter(label: "duplex_store_caught_up_events_total", factory: factory),
            notifyLag: CoreMetrics.Timer(label: "duplex_store_notify_lag_seconds", preferredDisplayUnit: .seconds, factory: factory)
        )
        rooms = Gauge(label: "duplex_chat_rooms", factory: factory)
        historyBytes = Gauge(label: "duplex_chat_history_bytes", factory: factory)
    }

    /// Has `server` record `store`'s room count and history bytes at each scrape.
    package func readRooms(of store: any ChatStore, at server: ServerMetrics) {
        let rooms = self.rooms
        let historyBytes = self.historyBytes
        server.beforeScrape.withLockedValue {
            $0.append {
                rooms.record(store.roomCount)
                historyBytes.record(store.historyBytes)
            }
        }
    }
}
