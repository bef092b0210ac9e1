import DuplexHost
import DuplexSchema
import NIOConcurrencyHelpers

/// Which recorded session a new connection replays: the n-th connection to a path gets the n-th
/// session recorded there (of its kind), and after the last one they start over.
package final class ReplayBook: Sendable {
    struct Key: Hashable {
        var kind: Cassette.Session.Kind
        var path: String
    }

    package let configuration: ReplayConfiguration
    /// The sessions at each path, by their index in the cassette.
    private let sessions: [Key: [Int]]
    private let taken = NIOLockedValueBox([Key: Int]())

    package init(_ configuration: ReplayConfiguration) {
        self.configuration = configuration
        var sessions: [Key: [Int]] = [:]
        for (index, session) in configuration.cassette.sessions.enumerated() {
            sessions[Key(kind: session.kind, path: session.path), default: []].append(index)
        }
        self.sessions = sessions
    }

    /// The paths that have sessions of `kind`, sorted.
    func paths(_ kind: Cassette.Session.Kind) -> [String] {
        sessions.keys.filter { $0.kind == kind }.map(\.path).sorted()
    }

    /// The methods of the SSE sessions recorded at `path` (`GET` for those with none), sorted.
    func methods(at path: String) -> [String] {
        let indices = sessions[Key(kind: .eventStream, path: path)] ?? []
        return Set(indices.map { configuration.cassette.sessions[$0].method ?? "GET" }).sorted()
    }

    /// The next session of `kind` at `path` and its number in the cassette (from 1); nil when
    /// none was recorded there.
    func take(_ kind: Cassette.Session.Kind, path: String) -> (number: Int, session: Cassette.Session)? {
        let key = Key(kind: kind, path: path)
        guard let indices = sessions[key], !indices.isEmpty else { return nil }
        let turn = taken.withLockedValue { taken in
            defer { taken[key, default: 0] += 1 }
            return taken[key, default: 0]
        }
        let index = indices[turn % indices.count]
        return (index + 1, configuration.cassette.sessions[index])
    }
}
