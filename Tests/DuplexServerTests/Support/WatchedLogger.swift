import Logging

/// A logger that reports each line it logs, at `level` and up, on a stream, so that a test can
/// wait for one and read its metadata.
enum WatchedLogger {
    struct Line: Sendable {
        var message: String
        var metadata: [String: String]
    }

    static func make(level: Logger.Level = .info) -> (Logger, AsyncStream<Line>) {
        let (lines, line) = AsyncStream.makeStream(of: Line.self)
        return (Logger(label: "watched") { _ in Handler(line: line, logLevel: level) }, lines)
    }

    private struct Handler: LogHandler {
        let line: AsyncStream<Line>.Continuation
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            line.yield(Line(message: "\(event.message)", metadata: (event.metadata ?? [:]).mapValues { "\($0)" }))
        }
    }
}
