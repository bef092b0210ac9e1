public import DuplexSchema
import Foundation
import NIOConcurrencyHelpers

/// Where a recording server (``RecordConfiguration``) puts what it records: a `Cassette` kept
/// in memory and, when made with a path, appended to that file as it happens, line by line
/// (`docs/cassettes.md`), so a recording cut short keeps every session and step up to the cut.
public final class CassetteRecorder: Sendable {
    private struct State {
        var cassette = Cassette()
        var file: FileHandle?
    }

    private let state: NIOLockedValueBox<State>

    /// A recorder that keeps the cassette in memory only.
    public init() {
        state = NIOLockedValueBox(State())
    }

    /// A recorder that also writes the cassette to `path`, replacing what is there.
    /// - Throws: when the file cannot be created.
    public init(writingTo path: String) throws {
        guard FileManager.default.createFile(atPath: path, contents: Data((Cassette.headerLine + "\n").utf8)) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
        }
        let file = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        try file.seekToEnd()
        state = NIOLockedValueBox(State(file: file))
    }

    deinit {
        state.withLockedValue { try? $0.file?.close() }
    }

    /// What was recorded so far.
    public var cassette: Cassette {
        state.withLockedValue { $0.cassette }
    }

    /// Begins a session (its steps are left out): numbered in the order sessions begin; its
    /// steps' times count from `start`.
    func begin(_ session: Cassette.Session, at start: ContinuousClock.Instant) -> SessionRecording {
        let number = state.withLockedValue { state in
            state.cassette.sessions.append(session)
            let number = state.cassette.sessions.count
            Self.append(Cassette.jsonLine(opening: session, number: number), to: state.file)
            return number
        }
        return SessionRecording(recorder: self, number: number, start: start)
    }

    fileprivate func record(_ step: Cassette.Step, session number: Int) {
        state.withLockedValue { state in
            state.cassette.sessions[number - 1].steps.append(step)
            Self.append(Cassette.jsonLine(for: step, session: number), to: state.file)
        }
    }

    private static func append(_ line: String, to file: FileHandle?) {
        // A small write to a local file: the page cache takes it at once.
        try? file?.write(contentsOf: Data((line + "\n").utf8))
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
        let ends: Bool
        switch action {
        case .close, .disconnect: ends = true
        case .message, .event: ends = false
        }
        let recorded = ended.withLockedValue { ended -> Bool in
            guard !ended else { return false }
            ended = ends
            return true
        }
        guard recorded else { return }
        recorder.record(Cassette.Step(at: max(.zero, ContinuousClock.now - start), action), session: number)
    }
}
