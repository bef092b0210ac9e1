import DuplexHost
public import DuplexSchema
import Foundation
import NIOConcurrencyHelpers

/// Where a recording server (``RecordConfiguration``) puts what it records: a `Cassette` kept in
/// memory, or appended to a file as it happens, line by line (`docs/cassettes.md`), so that a
/// recording cut short keeps every session and step up to the cut, and a long one holds no
/// memory.
public final class CassetteRecorder: Sendable {
    private struct State {
        /// What was recorded, in memory; for a file, nothing.
        var cassette = Cassette()
        var sessions = 0
        var file: (handle: FileHandle, path: String)?
    }

    private let state: NIOLockedValueBox<State>

    /// A recorder that keeps the cassette in memory.
    public init() {
        state = NIOLockedValueBox(State())
    }

    /// A recorder that writes the cassette to `path`, replacing what is there, and keeps none of
    /// it in memory.
    /// - Throws: when the file cannot be created.
    public init(writingTo path: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: Data((Cassette.headerLine + "\n").utf8)) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
        }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try handle.seekToEnd()
        state = NIOLockedValueBox(State(file: (handle, path)))
    }

    deinit {
        state.withLockedValue { try? $0.file?.handle.close() }
    }

    /// What was recorded so far: for a recorder that writes a file, read back from it.
    /// - Throws: `Cassette.FormatError` when the file no longer holds a cassette (something
    ///   else wrote to it), or the error reading it.
    public func cassette() throws -> Cassette {
        let (memory, path) = state.withLockedValue { ($0.cassette, $0.file?.path) }
        guard let path else { return memory }
        return try Cassette(jsonLines: String(contentsOfFile: path, encoding: .utf8))
    }

    /// Begins a session (its steps are left out): numbered in the order sessions begin; its
    /// steps' times count from `start`.
    func begin(_ session: Cassette.Session, at start: ContinuousClock.Instant) -> SessionRecording {
        let number = state.withLockedValue { state in
            state.sessions += 1
            if let file = state.file {
                Self.append(Cassette.jsonLine(opening: session, number: state.sessions), to: file.handle)
            } else {
                state.cassette.sessions.append(session)
            }
            return state.sessions
        }
        return SessionRecording(recorder: self, number: number, start: start)
    }

    fileprivate func record(_ step: Cassette.Step, session number: Int) {
        state.withLockedValue { state in
            if let file = state.file {
                Self.append(Cassette.jsonLine(for: step, session: number), to: file.handle)
            } else {
                state.cassette.sessions[number - 1].steps.append(step)
            }
        }
    }

    private static func append(_ line: String, to file: FileHandle) {
        // A small write to a local file: the page cache takes it at once.
        try? file.write(contentsOf: Data((line + "\n").utf8))
    }
}

/// One recorded session: each step is recorded with its time since the session began.
final class SessionRecording: Sendable {
    private let recorder: CassetteRecorder
    let number: Int
    private let start: ContinuousClock.Instant
    private let ended = NIOLockedValueBox(false)

    fileprivate init(recorder: CassetteRecorder, number: Int, start: ContinuousClock.Instant) {
        self.recorder = recorder
        self.number = number
        self.start = start
    }

    /// Records what happened now; nothing once the session ended (a close or a disconnect
    /// was recorded).
    func record(_ action: Cassette.Step.Action) {
        record(action, at: .now)
    }

    /// Records what happened at `instant` (a step kept until the session began).
    func record(_ action: Cassette.Step.Action, at instant: ContinuousClock.Instant) {
        let ends: Bool
        switch action {
        case .close, .disconnect: ends = true
        case .message, .event, .pongs: ends = false
        }
        let recorded = ended.withLockedValue { ended -> Bool in
            guard !ended else { return false }
            ended = ends
            return true
        }
        guard recorded else { return }
        recorder.record(Cassette.Step(at: max(.zero, instant - start), action), session: number)
    }
}
