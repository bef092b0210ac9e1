// One side of Benchmarks/client_peers.sh: echo throughput of a Swift WebSocket client against
// an out-of-process echo server, the same workload as the Node `ws` and Python `websockets`
// clients there. Each connection sends MESSAGES/CONNECTIONS 64-byte text messages as fast as
// the client lets it while it reads the echoes; the run ends when every echo is back.
//
//   client-peers-benchmark duplex|wsclient URL MESSAGES CONNECTIONS
//
// Prints one line: `<client> <connections> <messages/s>`.
import Duplex
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Logging
import WSClient

let arguments = CommandLine.arguments
if arguments.count == 5, arguments[1] == "consume", let bytes = Int(arguments[3]), let rate = Double(arguments[4]) {
    try await consume(url: arguments[2], bytes: bytes, bytesPerSecond: rate)
    exit(0)
}
guard arguments.count == 5, let total = Int(arguments[3]), let connections = Int(arguments[4]) else {
    FileHandle.standardError.write(
        Data(
            "usage: client-peers-benchmark duplex|wsclient URL MESSAGES CONNECTIONS\n       client-peers-benchmark consume URL BYTES BYTES_PER_SECOND (0: as fast as it can)\n"
                .utf8))
    exit(2)
}
let client = arguments[1]
let url = arguments[2]
let payload = String(repeating: "x", count: 64)
let perConnection = total / connections

/// The Duplex client: pipelined sends, a lossless message stream.
func duplex(count: Int) async throws {
    let socket = WebSocket(url: url)
    let messages = socket.messages
    try await socket.connect()
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask {
            var seen = 0
            for await _ in messages {
                seen += 1
                if seen == count { return }
            }
            throw WebSocketError(.connectionLost, "the stream ended after \(seen) echoes")
        }
        for _ in 0..<count { try await socket.send(payload) }
        try await group.waitForAll()
    }
    await socket.terminate()
}

/// swift-websocket's WSClient, the way its README writes a client.
func wsclient(count: Int) async throws {
    var logger = Logger(label: "bench")
    logger.logLevel = .error
    _ = try await WebSocketClient.connect(url: url, logger: logger) { inbound, outbound, _ in
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for _ in 0..<count { try await outbound.write(.text(payload)) }
            }
            var seen = 0
            for try await _ in inbound.messages(maxSize: 1 << 16) {
                seen += 1
                if seen == count { break }
            }
            try await group.waitForAll()
        }
    }
}

let start = ContinuousClock.now
try await withThrowingTaskGroup(of: Void.self) { group in
    for _ in 0..<connections {
        group.addTask {
            switch client {
            case "duplex": try await duplex(count: perConnection)
            case "wsclient": try await wsclient(count: perConnection)
            default: throw WebSocketError(.invalidURL, "unknown client \(client)")
            }
        }
    }
    try await group.waitForAll()
}
let elapsed = ContinuousClock.now - start
let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
print(client, connections, Int(Double(perConnection * connections) / seconds))

/// The slow-consumer run: reads `bytes` from the flood server at `bytesPerSecond` (0: as fast as
/// it can), checks every sequence number, and prints the rate, the loss and the peak RSS.
/// Prints: `consume <MB/s> <lost> <out of order> <peak RSS MiB>`.
func consume(url: String, bytes: Int, bytesPerSecond: Double) async throws {
    let socket = WebSocket(url: "\(url)?bytes=\(bytes)")
    let messages = socket.messages
    try await socket.connect()
    let start = ContinuousClock.now
    var received = 0
    var expected: UInt32 = 0
    var lost = 0
    var disordered = 0
    for await message in messages {
        let data = message.data
        let seq = data.prefix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        if seq > expected { lost += Int(seq - expected) } else if seq < expected { disordered += 1 }
        expected = max(expected, seq + 1)
        received += data.count
        if bytesPerSecond > 0 {
            // Pace the reader: never ahead of the target rate.
            let due = start + .seconds(Double(received) / bytesPerSecond)
            if due > .now { try await Task.sleep(until: due, clock: .continuous) }
        }
        if received >= bytes { break }
    }
    let elapsed = ContinuousClock.now - start
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    var usage = rusage()
    #if canImport(Glibc)
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let peakMiB = usage.ru_maxrss / 1024  // KiB on Linux
    #else
    getrusage(RUSAGE_SELF, &usage)
    let peakMiB = usage.ru_maxrss / (1024 * 1024)  // bytes on Darwin
    #endif
    print("consume", Int(Double(received) / seconds / 1e6), lost, disordered, peakMiB)
    await socket.terminate()
}
