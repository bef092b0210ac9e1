#if DEBUG
@testable import DuplexHost
@testable import DuplexChat
@testable import DuplexServer
import DuplexSchema

/// The resume positions a client sends: `Last-Event-ID` on `/events` (a tick) and on a room's
/// SSE stream (`EPOCH:SEQ`), and the chat join's `since`, `epoch`, `token` and `name`.
enum ResumeFuzz {
    static let target = FuzzTarget(
        name: "resume",
        properties:
            "no crash or overflow trap; a room stream id that parses prints back to itself and has a seq of at least 0; the first tick after any Last-Event-ID lies within the kept window or is the next tick, and its instant can be computed; the chat limits accept or refuse any text"
    ) { bytes in
        var input = FuzzInput(bytes)
        let interval = [1, 10, 1000, 86_400_000][Int(input.byte() % 4)] as Int64
        let window = Int64(input.byte()) * 97
        let text = String(decoding: input.rest(), as: UTF8.self)

        if let id = RoomStreamID(text) {
            require(id.seq >= 0, "a negative seq parsed from \(text.debugDescription)")
            require(RoomStreamID(id.description) == id, "\(text.debugDescription) parsed to \(id), which prints as \(id.description)")
        }

        let clock = TickClock()
        // The clock moves on meanwhile: the current tick is read before and after.
        let before = clock.currentTick(intervalMilliseconds: interval)
        let first = clock.firstTick(after: text, intervalMilliseconds: interval, window: window)
        let after = clock.currentTick(intervalMilliseconds: interval)
        require(
            first <= after + 1 && first >= before - max(window, 1) + 1,
            "first tick \(first) for \(text.debugDescription), current \(before)...\(after), window \(window)")
        _ = clock.instant(ofTick: first, intervalMilliseconds: interval)

        let limits = ChatLimits()
        _ = try? limits.validate(epoch: text)
        _ = try? limits.validate(token: text)
        _ = try? limits.validate(name: text)
        _ = try? limits.validate(room: text)
    }
}
#endif
