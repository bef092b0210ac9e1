import Duplex
import DuplexSchema
import DuplexTesting
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import TestSupport
import Testing

/// The built `duplex-server` binary, run as a process: what an operator sees.
@Suite("duplex-server process")
struct ServerProcessTests {
    /// A WebSocket peer that never reads: it upgrades on /echo, then sends `bytes` in masked
    /// binary frames, so the server's echoes back up.
    static func flood(port: Int, bytes: Int) async throws -> any Channel {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelOption(ChannelOptions.autoRead, value: false)
            .connect(host: "127.0.0.1", port: port)
            .get()
        let handshake =
            "GET /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        channel.write(ByteBuffer(string: handshake), promise: nil)
        // One 64 KiB binary frame, masked with key 0.
        let frame = ByteBuffer(bytes: [0x82, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0] + [UInt8](repeating: 0x61, count: 65_536))
        for _ in 0..<(bytes / 65_536) { channel.write(frame, promise: nil) }
        channel.flush()
        return channel
    }

    @Test("--event-loops sets how many event-loop threads serve; 0 is refused")
    func eventLoops() async throws {
        try await withTimeout(.seconds(60)) {
            let (server, port) = try await CLIProcess.server(["--event-loops", "1"])
            // Serve one request first, so the group surely exists.
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port).get()
            try await channel.close()
            let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(server.pid)/task")
            let loops = tasks.filter { task in
                let name = (try? String(contentsOfFile: "/proc/\(server.pid)/task/\(task)/comm", encoding: .utf8)) ?? ""
                return name.hasPrefix("NIO-SGLTN")
            }
            #expect(loops.count == 1, "event-loop threads: \(loops.count)")
            server.signal(SIGTERM)
            _ = try await server.waitForExit()
            let refused = try await CLIProcess("duplex-server", ["--event-loops", "0"]).waitForExit()
            #expect(refused.status == 64 && refused.stderr.contains("--event-loops must be from 1 to 1024"), "\(refused)")
        }
    }

    @Test(
        "--log-format json: every line on standard error is one JSON object; a client's traceparent is in its connection's lines; another format is refused"
    )
    func jsonLogs() async throws {
        try await withTimeout(.seconds(60)) {
            let (server, port) = try await CLIProcess.server(["--log-format", "json", "--log-level", "debug"])
            let traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
            let socket = WebSocket(
                request: WebSocketRequest(
                    url: URL(string: "ws://127.0.0.1:\(port)/echo")!,
                    additionalHeaders: ["traceparent": "00-\(traceID)-00f067aa0ba902b7-01"]
                )
            )
            try await socket.connect()
            _ = try await server.waitForStderr("WebSocket opened")
            await socket.disconnect()
            server.signal(SIGTERM)
            let output = try await server.waitForExit()
            #expect(output.status == 0)
            let lines = output.stderr.split(separator: "\n")
            let objects = lines.compactMap { line in
                (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
            }
            #expect(!lines.isEmpty && objects.count == lines.count, "every line is a JSON object: \(output.stderr)")
            let opened = try #require(objects.first { $0["message"] as? String == "WebSocket opened" })
            #expect(opened["level"] as? String == "debug" && opened["label"] as? String == "duplex-server" && opened["time"] is String)
            let metadata = try #require(opened["metadata"] as? [String: Any])
            #expect(metadata["trace_id"] as? String == traceID && metadata["route"] as? String == "echo")
            #expect(objects.contains { $0["message"] as? String == "shutting down" })
            let refused = try await CLIProcess("duplex-server", ["--log-format", "xml"]).waitForExit()
            #expect(refused.status == 64 && refused.stderr.contains("--log-format must be text or json"), "\(refused)")
        }
    }

    /// The event-loop threads of a running server, once it has served a connection.
    static func eventLoopThreads(_ server: CLIProcess, port: Int) async throws -> Int {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton).connect(host: "127.0.0.1", port: port).get()
        try await channel.close()
        let tasks = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(server.pid)/task")
        return tasks.filter { task in
            ((try? String(contentsOfFile: "/proc/\(server.pid)/task/\(task)/comm", encoding: .utf8)) ?? "").hasPrefix("NIO-SGLTN")
        }.count
    }

    @Test("without --event-loops, the server starts one event loop per CPU its affinity mask allows (taskset -c 0: one), or per --event-loops")
    func eventLoopsFollowAffinity() async throws {
        try await withTimeout(.seconds(60)) {
            let pinned = try CLIProcess(
                executable: URL(fileURLWithPath: "/usr/bin/taskset"),
                ["-c", "0", CLIProcess.binDirectory.appendingPathComponent("duplex-server").path, "--port", "0"])
            let output = try await pinned.waitForStdout("duplex-server listening on http://127.0.0.1:")
            let port = try #require(
                output.stdout.split(separator: "\n").first { $0.contains("listening on") }.flatMap { Int($0.split(separator: ":").last ?? "") })
            #expect(try await Self.eventLoopThreads(pinned, port: port) == 1)
            pinned.signal(SIGTERM)
            _ = try await pinned.waitForExit()

            let (asked, askedPort) = try await CLIProcess.server(["--event-loops", "3"])
            #expect(try await Self.eventLoopThreads(asked, port: askedPort) == 3, "--event-loops wins over the mask")
            asked.signal(SIGTERM)
            _ = try await asked.waitForExit()
        }
    }

    @Test("a --script or --echo-faults that is not JSON exits 64 with the line, the column and the text there, and no usage text")
    func scriptNotJSON() async throws {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("not-json-\(UUID().uuidString).json")
        try Data("{\"routes\": [\n  {\"path\": \"/feed\", \"websocket\": {\"onConnect\": [{\"send\": hello}]}}\n]}\n".utf8).write(to: file)
        defer { try? FileManager.default.removeItem(at: file) }
        try await withTimeout(.seconds(60)) {
            let refused = try await CLIProcess("duplex-server", ["--port", "0", "--script", file.path]).waitForExit()
            #expect(refused.status == 64, "\(refused)")
            #expect(refused.stderr.contains("--script: not JSON at line 2, column 58: expected a value (got \"h\")"), "\(refused)")
            #expect(refused.stderr.contains(#"[{"send": hello}]}}"#), "the text there: \(refused)")
            #expect(refused.stderr.contains(file.path), "\(refused)")
            #expect(!refused.stderr.contains("Usage:"), "no usage text after a script's error: \(refused)")
            let faults = try await CLIProcess("duplex-server", ["--port", "0", "--echo-faults", "{dropAfterSending: 3}"]).waitForExit()
            #expect(faults.status == 64 && faults.stderr.contains("--echo-faults: not JSON at line 1, column 2"), "\(faults)")
            #expect(!faults.stderr.contains("Usage:"), "\(faults)")
        }
    }

    @Test("--compression-window-bits sets the windows the server answers with; 16 is refused")
    func compressionWindowBits() async throws {
        try await withTimeout(.seconds(60)) {
            let (server, port) = try await CLIProcess.server(["--compression-window-bits", "10"])
            let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(port)/echo")!, configuration: .init(compression: PerMessageDeflate()))
            let messages = socket.messages
            try await socket.connect()
            let answer = try #require(socket.negotiatedExtensions)
            #expect(answer.contains("server_max_window_bits=10") && answer.contains("client_max_window_bits=10"), "\(answer)")
            let text = String(repeating: "a window of ten bits; ", count: 200)
            try await socket.send(text)
            try await socket.send(text)
            var echoes: [String] = []
            for await message in messages {
                echoes.append(message.text ?? "")
                if echoes.count == 2 { break }
            }
            #expect(echoes == [text, text])
            await socket.terminate()
            server.signal(SIGTERM)
            _ = try await server.waitForExit()
            let refused = try await CLIProcess("duplex-server", ["--compression-window-bits", "16"]).waitForExit()
            #expect(refused.status == 64 && refused.stderr.contains("--compression-window-bits must be 9 to 15"), "\(refused)")
        }
    }

    @Test("SIGTERM with peers that send and never read: the process exits 0 at the shutdown timeout")
    func sigtermWithStuckPeers() async throws {
        try await withTimeout(.seconds(60)) {
            let (server, port) = try await CLIProcess.server(["--shutdown-timeout", "1"])
            var peers: [any Channel] = []
            for _ in 0..<5 { peers.append(try await Self.flood(port: port, bytes: 4 * 1024 * 1024)) }
            defer { for peer in peers { peer.close(promise: nil) } }
            // The server has upgraded them all once it has answered a request made after them.
            let health = try await HTTPProbe.get(port: port, "/health")
            #expect(health.contains("200 OK"))
            let clock = ContinuousClock()
            let start = clock.now
            server.signal(SIGTERM)
            let exit = try await server.waitForExit(within: .seconds(30))
            #expect(exit.status == 0, "\(exit)")
            #expect(clock.now - start < .seconds(8), "exited at the 1 s deadline (and the 1 s close timeout), not never: \(clock.now - start)")
        }
    }
}
