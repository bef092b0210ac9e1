/// A route's path: literal segments, `:name` for one segment captured under that name, and `**`
/// last for whatever follows (any number of segments). `/chat/:room/events`, `/echo`, `/**`.
///
/// Segments are what lies between slashes, empty ones ignored, so `/echo/` is `/echo`. Where
/// several patterns match a path, the most specific wins: at the first segment where they
/// differ, a literal beats a capture, which beats `**`. Hummingbird's router, where the table
/// registers plain HTTP routes under the same text, matches the same way.
package struct RoutePattern: Sendable, Hashable, CustomStringConvertible {
    package enum Segment: Sendable, Hashable {
        case literal(String)
        case capture(String)
        case rest

        /// How specific it is: a literal 2, a capture 1, `**` 0.
        package var rank: Int {
            switch self {
            case .literal: 2
            case .capture: 1
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
            }
        }
        return parts.count == segments.count ? captures : nil
    }

    /// Whether it is more specific than `other`, for a path both match.
    package func isMoreSpecific(than other: RoutePattern) -> Bool {
        for (mine, theirs) in zip(segments, other.segments) where mine.rank != theirs.rank {
            return mine.rank > theirs.rank
        }
        return segments.count > other.segments.count
    }
}
