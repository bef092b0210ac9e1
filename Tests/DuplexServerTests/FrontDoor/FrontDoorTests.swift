import DuplexSchema
@testable import DuplexServer
import DuplexTesting
import Foundation
import Logging
import NIOCore
import ServiceLifecycle
import Testing

/// The server's front door (issue 16): every malformed upgrade, oversized head, slow or silent
/// peer and connection past the limit gets a specific answer, and nothing is held forever.
@Suite("front door: malformed requests, limits and timeouts")
struct FrontDoorTests {
    /// Sends `request` on a new connection and reads until the server closes it. The server may
    /// answer and close before the request is written (at the connection limit): what it sent is
    /// read all the same.
    static func exchange(_ port: Int, _ request: String) async throws -> String {
        try await withRawConnection(port: port) { inbound, outbound in
            try? await outbound.write(ByteBuffer(string: request))
            var text = ""
            for try await chunk in inbound { text += String(buffer: chunk) }
            return text
        }
    }

    static func upgrade(_ lines: [String], method: String = "GET", version: String = "HTTP/1.1") -> String {
        "\(method) /echo \(version)\r\nHost: 127.0.0.1\r\n" + lines.map { $0 + "\r\n" }.joined() + "\r\n"
    }

    static let key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="

    @Test("each malformed upgrade gets its own 400 or 426 answer, then the connection closes")
    func malformedUpgrades() async throws {
        let cases: [(String, String, String)] = [
            (
                "no key", Self.upgrade(["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13"]),
                "400 Bad Request|Sec-WebSocket-Key is missing"
            ),
            (
                "short key", Self.upgrade(["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", "Sec-WebSocket-Key: c2hvcnQ="]),
                "400 Bad Request|16 bytes"
            ),
            (
                "two keys", Self.upgrade(["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", Self.key, Self.key]),
                "400 Bad Request|one base64 value"
            ),
            (
                "version 8", Self.upgrade(["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 8", Self.key]),
                "426 Upgrade Required|Sec-WebSocket-Version: 13|version 13 only"
            ),
            (
                "version 14", Self.upgrade(["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 14", Self.key]),
                "426 Upgrade Required|Sec-WebSocket-Version: 13"
            ),
            (
                "no version", Self.upgrade(["Upgrade: websocket", "Connection: Upgrade", Self.key]),
                "426 Upgrade Required|Sec-WebSocket-Version is missing"
            ),
            (
                "POST", Self.upgrade(["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", Self.key], method: "POST"),
                "400 Bad Request|must be a GET request"
            ),
            (
                "a method with quotes",
                Self.upgrade(["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", Self.key], method: "P\"O\\ST"), #"not POST"}"#
            ),
            (
                "HTTP/1.0", Self.upgrade(["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", Self.key], version: "HTTP/1.0"),
                "400 Bad Request|must be HTTP/1.1"
            ),
            (
                "no Connection: Upgrade", Self.upgrade(["Upgrade: websocket", "Sec-WebSocket-Version: 13", Self.key]),
                "400 Bad Request|Connection: Upgrade"
            ),
            ("malformed request line", "GARBAGE\r\nUpgrade: websocket\r\n\r\n", "400 Bad Request|request line is malformed"),
        ]
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                for (name, request, expected) in cases {
                    let answer = try await Self.exchange(server.port, request)
                    for part in expected.split(separator: "|") {
                        #expect(answer.contains(part), "\(name): \(answer.debugDescription)")
                    }
                    #expect(answer.contains("Connection: close"), "\(name)")
                }
                // A well-formed upgrade still works.
                try await TestWebSocket.with(port: server.port, path: "/echo") { socket in
                    #expect(socket.status == 101)
                }
            }
        }
    }

    @Test("a 1 MiB URL gets 414, 40 KiB of headers or 101 fields get 431, on a first and on a keep-alive request")
    func oversizedHeads() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                let longURL = "GET /health?" + String(repeating: "a", count: 1024 * 1024) + " HTTP/1.1\r\nHost: x\r\n\r\n"
                #expect(try await Self.exchange(server.port, longURL).hasPrefix("HTTP/1.1 414 URI Too Long"))
                let bigHeaders =
                    "GET /health HTTP/1.1\r\nHost: x\r\n" + String(repeating: "X-Pad: \(String(repeating: "b", count: 1000))\r\n", count: 40) + "\r\n"
                #expect(try await Self.exchange(server.port, bigHeaders).hasPrefix("HTTP/1.1 431 Request Header Fields Too Large"))
                let manyFields = "GET /health HTTP/1.1\r\nHost: x\r\n" + (0..<101).map { "X-F\($0): v\r\n" }.joined() + "\r\n"
                let answer = try await Self.exchange(server.port, manyFields)
                #expect(answer.hasPrefix("HTTP/1.1 431") && answer.contains("more than 100 header fields"), "\(answer)")
                // 100 fields are fine.
                let hundred = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + (0..<98).map { "X-F\($0): v\r\n" }.joined() + "\r\n"
                #expect(try await Self.exchange(server.port, hundred).hasPrefix("HTTP/1.1 200"))
                // The second request on a keep-alive connection is checked as well, and answered
                // after the first, even when both arrive at once (pipelined).
                let twice = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + bigHeaders
                let both = try await Self.exchange(server.port, twice)
                #expect(both.hasPrefix("HTTP/1.1 200") && both.contains("HTTP/1.1 431") && both.contains("Connection: close"), "\(both)")
            }
        }
    }

    @Test("a recording server and a replaying one without the built-in routes answer an oversized keep-alive request themselves: 431")
    func oversizedKeepAliveOnEveryServer() async throws {
        let bigHeaders =
            "GET /health HTTP/1.1\r\nHost: x\r\n" + String(repeating: "X-Pad: \(String(repeating: "b", count: 1000))\r\n", count: 40) + "\r\n"
        let twice = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + bigHeaders
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { upstream in
                var recording = DuplexServerConfiguration()
                recording.record = RecordConfiguration(upstream: upstream.httpURL("/"), recorder: CassetteRecorder())
                var replaying = DuplexServerConfiguration()
                replaying.replay = ReplayConfiguration(cassette: Cassette())
                for configuration in [recording, replaying] {
                    try await withDuplexServer(configuration: configuration) { server in
                        // The first is forwarded to the upstream (recording) or answered by the
                        // replaying server's /health; the second is the front door's own answer,
                        // never forwarded upstream nor a 404.
                        let both = try await Self.exchange(server.port, twice)
                        #expect(both.hasPrefix("HTTP/1.1 200") && both.contains("HTTP/1.1 431") && both.contains("Connection: close"), "\(both)")
                    }
                }
            }
        }
    }

    @Test("other HTTP versions are answered at once: the HTTP/2 preface and HTTP/3.0 get 505; a request to upgrade to h2c is served as HTTP/1.1")
    func otherHTTPVersions() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                let start = ContinuousClock.now
                let preface = try await Self.exchange(server.port, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                #expect(preface.hasPrefix("HTTP/1.1 505 HTTP Version Not Supported"), "\(preface)")
                #expect(preface.contains("HTTP/2.0 is not spoken here"), "\(preface)")
                #expect(ContinuousClock.now - start < .seconds(8), "answered, not held until the request head timeout (10 s)")
                let three = try await Self.exchange(server.port, "GET /health HTTP/3.0\r\nHost: 127.0.0.1\r\n\r\n")
                #expect(three.hasPrefix("HTTP/1.1 505"), "\(three)")
                let h2c = try await Self.exchange(
                    server.port,
                    "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade, HTTP2-Settings, close\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"
                )
                #expect(h2c.hasPrefix("HTTP/1.1 200"), "served as HTTP/1.1: \(h2c)")
                #expect(h2c.contains(#""status":"ok""#) || h2c.contains("ok"), "\(h2c)")
            }
        }
    }

    @Test("a silent connection, headers never finished and a slowloris are closed at the request head timeout")
    func slowAndSilentPeers() async throws {
        try await withTimeout(.seconds(30)) {
            // 2 s: long enough that a loaded machine (the whole suite in parallel on 2 cores) reads
            // the first bytes before it.
            try await withDuplexServer(configuration: .init(requestHeadTimeout: .seconds(2))) { server in
                let clock = ContinuousClock()
                // Silent: closed with no answer.
                var start = clock.now
                #expect(try await Self.exchange(server.port, "") == "")
                #expect(clock.now - start >= .milliseconds(1990))
                // Headers never finished: 408.
                start = clock.now
                let unfinished = try await Self.exchange(server.port, "GET /health HTTP/1.1\r\nHost: x\r\n")
                #expect(unfinished.hasPrefix("HTTP/1.1 408 Request Timeout"), "\(unfinished)")
                #expect(clock.now - start >= .milliseconds(1990))
                // Slowloris: a header byte every 50 ms (the workload's pace) does not extend the deadline.
                start = clock.now
                let answer = try await withRawConnection(port: server.port) { inbound, outbound in
                    let trickle = Task {
                        for byte in "GET /health HTTP/1.1\r\nX-Slow: ".utf8 + Array(repeating: UInt8(ascii: "z"), count: 1000) {
                            try await outbound.write(ByteBuffer(bytes: [byte]))
                            try await clock.sleep(for: .milliseconds(50))
                        }
                    }
                    defer { trickle.cancel() }
                    var text = ""
                    for try await chunk in inbound { text += String(buffer: chunk) }
                    return text
                }
                #expect(answer.hasPrefix("HTTP/1.1 408"), "\(answer)")
                #expect(clock.now - start < .seconds(5), "closed at the deadline, not when the trickle ends (50 s)")
                #expect(server.server.connectionCount == 0)
            }
        }
    }

    @Test("past maxConnections a new connection gets 503; once one closes, connections are served again")
    func connectionLimit() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(configuration: .init(maxConnections: 3)) { server in
                try await TestWebSocket.with(port: server.port, path: "/echo") { _ in
                    try await TestWebSocket.with(port: server.port, path: "/echo") { _ in
                        try await TestWebSocket.with(port: server.port, path: "/echo") { third in
                            #expect(third.status == 101)
                            let refused = try await Self.exchange(server.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                            #expect(refused.hasPrefix("HTTP/1.1 503") && refused.contains("connection limit"), "\(refused)")
                        }
                    }
                }
                // The closed connections leave the count as their channels close: retry until served.
                while true {
                    let answer = try await Self.exchange(server.port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    if answer.hasPrefix("HTTP/1.1 200") { break }
                    #expect(answer.hasPrefix("HTTP/1.1 503"))
                }
            }
        }
    }

    @Test("while refusing, a header that merely contains /_chaos/ does not get through: the path decides")
    func refusalMatchesPath() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(configuration: .init(chaos: true)) { server in
                let refuse = try await Self.exchange(
                    server.port, "POST /_chaos/refuse?ms=60000 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                #expect(refuse.hasPrefix("HTTP/1.1 200"), "\(refuse)")
                let sneaky = Self.upgrade(["X: /_chaos/", "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13", Self.key])
                #expect(try await Self.exchange(server.port, sneaky).hasPrefix("HTTP/1.1 503"))
                let health = try await Self.exchange(server.port, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
                #expect(health.hasPrefix("HTTP/1.1 503"))
            }
        }
    }

    @Test("a graceful shutdown with peers that send and never read ends at the shutdown timeout")
    func shutdownDeadline() async throws {
        try await withTimeout(.seconds(30)) {
            let server = DuplexServer(
                configuration: .init(port: 0, shutdownTimeout: .milliseconds(500)),
                logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
            )
            let group = ServiceGroup(configuration: .init(services: [server], gracefulShutdownSignals: [], logger: Logger(label: "test")))
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                let port = try await server.port()
                // Three peers that send 4 MiB each to /echo and never read: the server's writes of
                // the echoes back up, so its close frame cannot be written either.
                let (upgraded, upgrade) = AsyncStream<Void>.makeStream()
                // One masked 64 KiB binary frame (mask key 0), written again and again.
                let frame: [UInt8] = [0x82, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0] + [UInt8](repeating: 0x61, count: 65_536)
                let floods = (0..<3).map { _ in
                    Task {
                        try await TestWebSocket.with(port: port, path: "/echo") { socket in
                            upgrade.yield()
                            for _ in 0..<64 { try await socket.writeRaw(frame) }
                            await waitUntilCancelled()
                        }
                    }
                }
                defer { for flood in floods { flood.cancel() } }
                var count = 0
                for await _ in upgraded {
                    count += 1
                    if count == 3 { break }
                }
                let clock = ContinuousClock()
                let start = clock.now
                await group.triggerGracefulShutdown()
                try await tasks.waitForAll()
                #expect(clock.now - start < .seconds(5), "stopped at the deadline: \(clock.now - start)")
            }
        }
    }
}

/// Queues are bounded in bytes (issue 16: a room SSE watcher that never read held about 100 MB).
@Suite("bounded queues")
struct BoundedQueueTests {
    @Test("a room SSE watcher that falls behind by more than outboundQueueBytes gets the end of its stream, not unbounded memory")
    func slowWatcherIsCut() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer(configuration: .init(outboundQueueBytes: 64 * 1024)) { server in
                try await TestHTTPResponse.get(port: server.port, "/chat/flood/events") { watcher in
                    try await TestWebSocket.with(port: server.port, path: "/chat/flood?name=writer") { writer in
                        _ = try await writer.receiveWelcome()
                        // The watcher is stalled: nothing is written to it for 3 s (long enough for a
                        // loaded machine to say it all), so its queue grows.
                        #expect(server.server.stallConnections(.route("chat-events"), for: .seconds(3)) == 1)
                        // Text of control characters: JSON escapes each to 6 bytes.
                        let text = String(repeating: "\u{1}", count: 4000)
                        for i in 1...16 {
                            try await writer.say(text, id: "m\(i)")
                            _ = try await writer.receiveAck(for: "m\(i)")
                        }
                    }
                    // After the stall the watcher gets what was queued, then the end of the stream.
                    while try await watcher.readChunk() {}
                    #expect(watcher.bodyText.utf8.count < 200 * 1024, "at most the queue's 64 KiB and a little: \(watcher.bodyText.utf8.count)")
                }
            }
        }
    }
}
