// Events per second one SSE client parses: through the parser alone, and end to end from the
// Duplex server on loopback.
//
//   swift run -c release --package-path Benchmarks sse-benchmark [EVENTS]
//
// EVENTS is how many ticks the end-to-end part replays (100,000 by default); it checks that each
// arrives once, in order (a burst far past the server's outbound queue goes out whole).
import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation

func seconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
}

// 1. The parser alone: 1,000,000 events of 100 bytes, fed in 16 KiB chunks.
let count = 1_000_000
var stream: [UInt8] = []
for n in 0..<10_000 {
    let head = "id: \(n)\nevent: tick\ndata: "
    let padding = String(repeating: "x", count: 100 - head.utf8.count - 3)
    stream += Array((head + padding + "\n\n").utf8)
}
let eventBytes = stream.count / 10_000
var parsed = 0
let parserStart = ContinuousClock.now
var parser = ServerSentEventParser()
for _ in 0..<(count / 10_000) {
    var offset = 0
    while offset < stream.count {
        let end = min(offset + 16_384, stream.count)
        try parser.parse(stream[offset..<end]) { _ in parsed += 1 }
        offset = end
    }
}
let parserRate = Double(parsed) / seconds(ContinuousClock.now - parserStart)
print("SSE parser alone: \(parsed) events of \(eventBytes) bytes in 16 KiB chunks")
print(String(format: "  %.0f events/s (%.0f MB/s)", parserRate, parserRate * Double(eventBytes) / 1e6))

// 2. End to end: the server replays 100,000 ticks already due, as fast as it can write them,
//    to a ServerSentEventManager resuming from an old Last-Event-ID.
let replay = CommandLine.arguments.dropFirst().first.flatMap { Int($0) } ?? 100_000
var configuration = DuplexServerConfiguration()
configuration.historyLimit = replay
try await withDuplexServer(configuration: configuration) { server in
    let interval: Int64 = 10
    let now = Int64(Date().timeIntervalSince1970 * 1000) / interval
    let sse = ServerSentEventManager(
        request: SSERequest(url: server.httpURL("/events?interval=\(interval)")),
        retryPolicy: .disabled,
        configuration: .init(streamBufferLimit: 2 * replay),
        lastEventID: String(now - Int64(replay))
    )
    let events = sse.events
    let start = ContinuousClock.now
    try await sse.connect()
    // consume off the main actor, as an app's background task would
    let (received, inOrder) = await Task.detached {
        var received = 0
        var inOrder = true
        var previous: Int64?
        for await event in events {
            received += 1
            let id = event.id.flatMap { Int64($0) }
            if id == nil || previous.map({ id != $0 + 1 }) == true { inOrder = false }
            previous = id
            if received == replay { break }
        }
        return (received, inOrder)
    }.value
    let rate = Double(received) / seconds(ContinuousClock.now - start)
    let order = inOrder ? "each once, in order" : "NOT each once in order"
    print("SSE end to end: \(received) tick events (about 90 bytes) replayed by duplex-server on 127.0.0.1, \(order)")
    print(String(format: "  %.0f events/s", rate))
    await sse.terminate()
}
