// Client echo throughput and round-trip latency against the Duplex server, for the Duplex
// client and, in the same run, Python's websockets client (Benchmarks/python_echo_client.py).
//
//   swift run -c release --package-path Benchmarks client-echo-benchmark
import Duplex
import DuplexServer
import DuplexTesting
import Foundation

let payload = String(repeating: "x", count: 64)
let messagesPerRun = 200_000
let roundTrips = 10_000

/// Sends `count` messages on one socket while reading the echoes; returns when all are back.
func pump(_ url: URL, count: Int) async throws {
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
        }
        for _ in 0..<count { try await socket.send(payload) }
        try await group.waitForAll()
    }
    await socket.terminate()
}

func throughput(_ url: URL, connections: Int) async throws -> Double {
    let perConnection = messagesPerRun / connections
    let start = ContinuousClock.now
    try await withThrowingTaskGroup(of: Void.self) { group in
        for _ in 0..<connections { group.addTask { try await pump(url, count: perConnection) } }
        try await group.waitForAll()
    }
    let seconds = Double((ContinuousClock.now - start).components.attoseconds) / 1e18 + Double((ContinuousClock.now - start).components.seconds)
    return Double(perConnection * connections) / seconds
}

func latency(_ url: URL) async throws -> (p50: Double, p99: Double) {
    let socket = WebSocket(url: url)
    let messages = socket.messages
    try await socket.connect()
    var iterator = messages.makeAsyncIterator()
    var samples: [Double] = []
    samples.reserveCapacity(roundTrips)
    for _ in 0..<roundTrips {
        let start = ContinuousClock.now
        try await socket.send(payload)
        _ = await iterator.next()
        let elapsed = ContinuousClock.now - start
        samples.append(Double(elapsed.components.seconds) * 1e6 + Double(elapsed.components.attoseconds) / 1e12)
    }
    await socket.terminate()
    samples.sort()
    return (samples[samples.count / 2], samples[samples.count * 99 / 100])
}

func python(_ url: URL) -> String {
    let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../python_echo_client.py").standardized.path
    let process = Process()
    let output = Pipe()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
    process.arguments = ["python3", script, url.absoluteString, String(messagesPerRun), String(roundTrips)]
    process.standardOutput = output
    do {
        try process.run()
        process.waitUntilExit()
    } catch {
        return "python3 could not run: \(error)"
    }
    return String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
}

var configuration = DuplexServerConfiguration()
configuration.maxMessageBytes = 1 << 20
try await withDuplexServer(configuration: configuration) { server in
    let url = server.webSocketURL("/echo")
    _ = try await throughput(url, connections: 1)  // warm up
    let one = try await throughput(url, connections: 1)
    let hundred = try await throughput(url, connections: 100)
    let (p50, p99) = try await latency(url)
    print("Duplex client, 64-byte messages, \(messagesPerRun) per run, against duplex-server on 127.0.0.1")
    print(String(format: "  throughput, 1 connection:    %9.0f messages/s", one))
    print(String(format: "  throughput, 100 connections: %9.0f messages/s", hundred))
    print(String(format: "  round trip (%d sequential):  p50 %.1f µs, p99 %.1f µs", roundTrips, p50, p99))
    print("Python websockets client, same server, same run")
    print(python(url), terminator: "")
}
