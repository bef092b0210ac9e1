// HTTP/2 against HTTP/1.1, both over TLS, against a duplex-server in another process: 100
// WebSockets on one HTTP/2 connection (RFC 8441) against 100 TLS connections, and 100 SSE
// subscribers on one HTTP/2 connection against 100 TLS connections. For each: the server's
// resident memory with them open (VmRSS of its process, less before they opened), and the
// throughput: echoes a second with 8 messages of 64 bytes in flight per socket, events a second
// from /events?interval=10 (100 a second each).
//
//   Benchmarks/http2.sh   (builds; a fresh server per run, pinned to core 0, this on core 1;
//                          the four modes interleaved, 3 rounds, medians)
//   http2-benchmark MODE PORT SERVER_PID CA_PEM_FILE [SECONDS]
//   MODE: ws-http1, ws-http2, sse-http1 or sse-http2; prints "name<TAB>rate<TAB>server KiB"
import Duplex
import DuplexSchema
import Foundation

let arguments = CommandLine.arguments
guard arguments.count >= 5, let port = Int(arguments[2]), let pid = Int(arguments[3]) else {
    print("usage: http2-benchmark MODE PORT SERVER_PID CA_PEM_FILE [SECONDS]")
    exit(64)
}
let mode = arguments[1]
let caPEM = try String(contentsOfFile: arguments[4], encoding: .utf8)
let seconds = arguments.count > 5 ? Int(arguments[5]) ?? 5 : 5
let clients = 100
let inFlight = 8

/// The server's resident memory, in KiB.
func serverRSS() -> Int {
    let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
    let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
    return Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
}

/// Waits for the server's memory to settle after connections open or close.
func settledRSS() async throws -> Int {
    try await Task.sleep(for: .milliseconds(500))
    return serverRSS()
}

struct Result {
    var rate: Double
    var rssKiB: Int
}

func webSockets(_ version: HTTPVersionPreference) async throws -> Result {
    var configuration = WebSocketConfiguration(tlsTrust: .certificateAuthority(pem: caPEM))
    configuration.httpVersion = version
    let before = try await settledRSS()
    let sockets = (0..<clients).map { _ in WebSocket(url: URL(string: "wss://127.0.0.1:\(port)/echo")!, configuration: configuration) }
    let streams = sockets.map(\.messages)
    for socket in sockets { try await socket.connect() }
    let rss = try await settledRSS() - before
    let payload = String(repeating: "x", count: 64)
    let deadline = ContinuousClock.now + .seconds(seconds)
    let start = ContinuousClock.now
    let echoes = try await withThrowingTaskGroup(of: Int.self) { group in
        for (socket, stream) in zip(sockets, streams) {
            group.addTask {
                var iterator = stream.makeAsyncIterator()
                var count = 0
                for _ in 0..<inFlight { try await socket.send(payload) }
                while ContinuousClock.now < deadline {
                    guard await iterator.next() != nil else { break }
                    count += 1
                    try await socket.send(payload)
                }
                return count
            }
        }
        return try await group.reduce(0, +)
    }
    let elapsed = ContinuousClock.now - start
    for socket in sockets { await socket.disconnect() }
    return Result(rate: Double(echoes) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18), rssKiB: rss)
}

func subscribers(_ version: HTTPVersionPreference) async throws -> Result {
    var configuration = SSEConfiguration(tlsTrust: .certificateAuthority(pem: caPEM))
    configuration.httpVersion = version
    let before = try await settledRSS()
    let managers = (0..<clients).map { _ in
        ServerSentEventManager(url: URL(string: "https://127.0.0.1:\(port)/events?interval=10")!, configuration: configuration)
    }
    let streams = managers.map(\.events)
    for manager in managers { try await manager.connect() }
    let rss = try await settledRSS() - before
    let deadline = ContinuousClock.now + .seconds(seconds)
    let start = ContinuousClock.now
    let events = await withTaskGroup(of: Int.self) { group in
        for stream in streams {
            group.addTask {
                var count = 0
                for await _ in stream {
                    count += 1
                    if ContinuousClock.now >= deadline { break }
                }
                return count
            }
        }
        return await group.reduce(0, +)
    }
    let elapsed = ContinuousClock.now - start
    for manager in managers { await manager.disconnect() }
    return Result(rate: Double(events) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18), rssKiB: rss)
}

let modes: [String: (String, () async throws -> Result)] = [
    "ws-http1": ("100 WebSockets, HTTP/1.1 (100 TLS connections)", { try await webSockets(.http1) }),
    "ws-http2": ("100 WebSockets, HTTP/2 (1 TLS connection)", { try await webSockets(.http2) }),
    "sse-http1": ("100 SSE subscribers, HTTP/1.1 (100 TLS connections)", { try await subscribers(.http1) }),
    "sse-http2": ("100 SSE subscribers, HTTP/2 (1 TLS connection)", { try await subscribers(.http2) }),
]
guard let (name, run) = modes[mode] else {
    print("unknown mode \(mode): ws-http1, ws-http2, sse-http1 or sse-http2")
    exit(64)
}
let result = try await run()
print(String(format: "%@\t%.0f\t%d", name, result.rate, result.rssKiB))
