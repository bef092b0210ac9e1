/// A route's path: literal segments, `:name` for one segment captured under that name, `*` for
/// any one segment, and `**` last for whatever follows (any number of segments, none included).
/// `/chat/:room/events`, `/echo`, `/feed/*/deep`, `/**`.
///
/// Segments are what lies between slashes, empty ones ignored, so `/echo/` is `/echo`. Where
/// several patterns match a path, the most specific wins: at the first segment where they
/// differ, a literal beats a capture, a capture beats `*`, and `*` beats `**` (and a pattern
/// that ends where the path does beats one whose `**` matched nothing). It is the only matcher of
/// a server's routes (``RouteTable``). Hummingbird's router picks the same route wherever it
/// finds one; it does not backtrack, so where a literal segment leads nowhere it answers 404,
/// where this goes back and takes a capture, `*` or `**` (a test compares the two on generated
/// patterns and paths).
package struct RoutePattern: Sendable, Hashable, CustomStringConvertible {
    package enum Segment: Sendable, Hashable {
        case literal(String)
        case capture(String)
        /// `*`: any one segment, not captured.
        case wildcard
        case rest

        /// How specific it is: a literal 3, a capture 2, `*` 1, `**` 0.
        package var rank: Int {
            switch self {
            case .literal: 3
            case .capture: 2
            case .wildcard: 1
            case .rest: 0
            }
        }
    }

    package let segments: [Segment]

    /// Reads `text`: `/chat/:room`. A `**` anywhere but last is taken literally.
    package init(_ text: String) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: true)
        segments = parts.enumerated().map { index, part in
            if part == "**", index == parts.count - 1 { return .rest }
            if part == "*" { return .wildcard }
            if part.hasPrefix(":"), part.count > 1 { return .capture(String(part.dropFirst())) }
            return .literal(String(part))
        }
    }

    /// `/chat/:room/events`, as Hummingbird's `RouterPath` reads it.
    package var description: String {
        "/"
            + segments.map { segment in
                switch segment {
                case .literal(let text): text
                case .capture(let name): ":\(name)"
                case .wildcard: "*"
                case .rest: "**"
                }
            }.joined(separator: "/")
    }

    /// The captures when `path` (without its query) matches; nil when it does not.
    package func match(_ path: some StringProtocol) -> [String: String]? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: true)
        var captures: [String: String] = [:]
        for (index, segment) in segments.enumerated() {
            switch segment {
            case .rest:
                return captures
            case .literal(let text):
                guard index < parts.count, parts[index] == text else { return nil }
            case .capture(let name):
                guard index < parts.count else { return nil }
                captures[name] = String(parts[index])
            case .wildcard:
                guard index < parts.count else { return nil }
            }
        }
        return parts.count == segments.count ? captures : nil
    }

    /// Whether it is more specific than `other`, for a path both match.
    package func isMoreSpecific(than other: RoutePattern) -> Bool {
        for (mine, theirs) in zip(segments, other.segments) where mine.rank != theirs.rank {
            return mine.rank > theirs.rank
        }
        // Alike as far as the shorter goes: the longer ends in a `**` that matched nothing,
        // and the one that ended there is exact.
        return segments.count < other.segments.count
    }
}
