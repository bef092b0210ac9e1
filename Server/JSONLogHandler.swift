import Foundation
import Logging

/// `--log-format json`: one JSON object per line on standard error, for log shippers (Vector,
/// Fluent Bit, Loki, CloudWatch):
///
/// ```json
/// {"time":"2026-11-26T18:14:03.512Z","level":"notice","label":"duplex-server","message":"chaos","metadata":{"affected":"1","path":"/_chaos/drop"},"source":"DuplexServer"}
/// ```
///
/// Metadata values keep their shape: a string, an array or an object of them.
struct JSONLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .info
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = self.metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let extra = event.metadata { merged.merge(extra) { _, new in new } }
        var line: [String: Any] = [
            "time": Self.timestamp(),
            "level": event.level.rawValue,
            "label": label,
            "message": event.message.description,
            "source": event.source,
        ]
        if !merged.isEmpty { line["metadata"] = merged.mapValues(Self.json) }
        guard var data = try? JSONSerialization.data(withJSONObject: line, options: [.sortedKeys, .withoutEscapingSlashes]) else { return }
        data.append(0x0A)
        FileHandle.standardError.write(data)
    }

    /// A metadata value as JSON: a string, an array or an object.
    static func json(_ value: Logger.Metadata.Value) -> Any {
        switch value {
        case .string(let string): string
        case .stringConvertible(let convertible): convertible.description
        case .array(let array): array.map(json)
        case .dictionary(let dictionary): dictionary.mapValues(json)
        }
    }

    /// Now, in UTC, to the millisecond (RFC 3339).
    static func timestamp() -> String {
        Date.ISO8601FormatStyle(includingFractionalSeconds: true).format(Date.now)
    }
}
