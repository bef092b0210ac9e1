// Micro-benchmarks of DuplexSchema's public code paths, with ordo-one's package-benchmark:
// the WHATWG SSE parser and encoder, and the decoding of chat frames from JSON.
//
//   swift package --package-path Benchmarks benchmark --target SchemaBenchmarks
//
// (or `Benchmarks/run micro`). Each benchmark's unit of work is stated in its name; the tool
// reports wall-clock time, throughput and allocations per iteration (not CPU time, which it
// counts in 10 ms ticks on Linux: too coarse here).
import Benchmark
import DuplexSchema
import Foundation

/// 1,000 SSE events of about 100 bytes each (`id`, `event` and `data` fields), as one stream.
let eventStream: [UInt8] = {
    var stream: [UInt8] = []
    for n in 0..<1_000 {
        let head = "id: \(n)\nevent: tick\ndata: "
        let padding = String(repeating: "x", count: max(0, 100 - head.utf8.count - 3))
        stream += Array((head + padding + "\n\n").utf8)
    }
    return stream
}()

/// A message frame and a `say`, as docs/protocol.md shows them.
let chatMessage = Data(
    #"{"clientMessageId":"a-17","from":"alice","room":"lobby","sentAt":"2026-11-22T09:30:00.250Z","seq":43,"text":"hello bob","type":"message","v":1}"#
        .utf8)
let chatSay = Data(#"{"clientMessageId":"a-17","text":"hello bob","type":"say","v":1}"#.utf8)

let benchmarks: @Sendable () -> Void = {
    let configuration = Benchmark.Configuration(
        metrics: [.wallClock, .mallocCountTotal, .throughput],
        maxDuration: .seconds(2)
    )

    Benchmark("SSE parser: 1,000 events of 100 bytes in 16 KiB chunks", configuration: configuration) { benchmark in
        for _ in benchmark.scaledIterations {
            var parser = ServerSentEventParser()
            var events = 0
            var offset = 0
            while offset < eventStream.count {
                let end = min(offset + 16_384, eventStream.count)
                events += try parser.parse(eventStream[offset..<end]).count
                offset = end
            }
            precondition(events == 1_000)
            blackHole(events)
        }
    }

    Benchmark("SSE encoder: 1,000 events", configuration: configuration) { benchmark in
        let event = ServerSentEvent(id: "1042", event: "tick", data: #"{"n":1042,"at":"2026-11-28T09:30:00Z"}"#)
        for _ in benchmark.scaledIterations {
            var bytes = 0
            for _ in 0..<1_000 { bytes += try event.encoded().utf8.count }
            blackHole(bytes)
        }
    }

    Benchmark("Chat server frame: decode 1,000 message frames", configuration: configuration) { benchmark in
        for _ in benchmark.scaledIterations {
            for _ in 0..<1_000 { blackHole(try ChatServerFrame.decode(chatMessage)) }
        }
    }

    Benchmark("Chat client frame: decode 1,000 say frames", configuration: configuration) { benchmark in
        for _ in benchmark.scaledIterations {
            for _ in 0..<1_000 { blackHole(try ChatClientFrame.decode(chatSay)) }
        }
    }
}
