import DuplexServer
import Foundation

var configuration = DuplexServerConfiguration(port: 0)
configuration.record = RecordConfiguration(
    upstream: URL(string: "wss://api.example.com")!,
    recorder: try CassetteRecorder(writingTo: "session.jsonl"),
    redact: ["authorization"]
)
