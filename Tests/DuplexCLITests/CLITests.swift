import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import NIOHTTP1
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import TestSupport
import Testing

/// The built `duplex` binary against the in-process server and local peers: every subcommand,
/// and every documented exit status.
@Suite("duplex CLI")
struct CLITests {
    static let limit: Duration = .seconds(40)

    func duplex(_ arguments: String...) throws -> CLIProcess {
        try CLIProcess("duplex", arguments)
    }

    @Test("--help documents every exit status")
    func help() async throws {
        let output = try await duplex("--help").waitForExit()
        #expect(output.status == 0)
        for (code, words) in [
            (1, "echo reply differed"), (2, "timed out"), (3, "malformed URL"), (4, "unreachable"), (5, "TLS"), (6, "4xx/5xx"),
            (7, "connection lost"), (64, "usage"),
        ] {
            #expect(output.stdout.contains("  \(code) ") && output.stdout.contains(words), "status \(code)")
        }
    }

    // MARK: chat

    /// Two `duplex chat` processes in `room`, both joined.
    func chatPair(_ server: RunningDuplexServer, room: String, names: (String, String) = ("alice", "bob")) async throws -> (CLIProcess, CLIProcess) {
        let url = server.webSocketURL("/chat/\(room)").absoluteString
        let first = try duplex("chat", url, "--name", names.0)
        try await first.waitForStdout("* joined #\(room) as \(names.0)")
        let second = try duplex("chat", url, "--name", names.1)
        try await second.waitForStdout("* joined #\(room) as \(names.1); here: \(names.0), \(names.1)")
        return (first, second)
    }

    @Test("two chat processes talk: a line typed in one appears in the other; /who; /quit exits 0")
    func chatBetweenTwoProcesses() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let (alice, bob) = try await chatPair(server, room: "demo")
                try await alice.waitForStdout("* bob joined")
                bob.send("hello alice")
                try await alice.waitForStdout("bob: hello alice")
                alice.send("hi bob, ünïcödé too")
                try await bob.waitForStdout("alice: hi bob, ünïcödé too")
                alice.send("/who")
                try await alice.waitForStdout("* 2 here: alice, bob")
                bob.send("/quit")
                let bobEnd = try await bob.waitForExit()
                #expect(bobEnd.status == 0, "\(bobEnd)")
                try await alice.waitForStdout("* bob left")
                // Each message once: no duplicates.
                #expect(alice.output.stdout.components(separatedBy: "bob: hello alice").count == 2)
                alice.send("/quit")
                #expect(try await alice.waitForExit().status == 0)
            }
        }
    }

    @Test("chat says it is reconnecting after a drop, and nothing said meanwhile is lost")
    func chatReconnects() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let (alice, bob) = try await chatPair(server, room: "flaky")
                bob.send("before")
                try await alice.waitForStdout("bob: before")
                _ = server.server.dropConnections(.room("flaky"))
                try await alice.waitForStderr("reconnecting")
                bob.send("after the drop")
                try await alice.waitForStdout("bob: after the drop")
                try await alice.waitForStdout("* reconnected to #flaky")
                #expect(alice.output.stdout.components(separatedBy: "bob: before").count == 2)
                bob.closeInput()
                #expect(try await bob.waitForExit().status == 0)
                alice.closeInput()
                #expect(try await alice.waitForExit().status == 0)
            }
        }
    }

    @Test("chat notices a path switch by its pings (--ping-interval), and at once on /check; both resume and lose nothing")
    func chatPathSwitch() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let proxy = try await FaultProxy.start(upstreamPort: server.port)
                let url = "ws://127.0.0.1:\(proxy.port)/chat/moving"
                let alice = ChatClient(url: server.webSocketURL("/chat/moving"), name: "alice")
                let heard = alice.events
                _ = try await alice.join(timeout: .seconds(10))

                // No hint: the pings find the half-open connection, after pingInterval × (2 + 1) at most.
                let pinged = try duplex("chat", url, "--name", "bob", "--ping-interval", "0.3")
                try await pinged.waitForStdout("* joined #moving as bob")
                let switched = ContinuousClock.now
                proxy.add(.pathSwitch, direction: .both)
                try await pinged.waitForStderr("connection lost")
                let noticed = switched.duration(to: .now)
                #expect(noticed >= .milliseconds(250), "not before a ping went unanswered: \(noticed)")
                try await pinged.waitForStdout("* reconnected to #moving")
                pinged.send("after the switch")
                _ = try await heard.first(within: .seconds(10)) { event in
                    if case .message(let message) = event { return message.text == "after the switch" }
                    return false
                }

                // The hint: pings every 60 s would take minutes; /check replaces the connection at once.
                let hinted = try duplex("chat", url, "--name", "carol", "--ping-interval", "60")
                try await hinted.waitForStdout("* joined #moving as carol")
                hinted.send("/check")
                try await hinted.waitForStdout("* connection checked: it answered")
                proxy.add(.pathSwitch, direction: .both)
                hinted.send("/check")
                try await hinted.waitForStderr("connection lost")
                try await hinted.waitForStdout("* reconnected to #moving")
                hinted.send("carol after the switch")
                try await pinged.waitForStdout("carol: carol after the switch")
                #expect(pinged.output.stdout.components(separatedBy: "carol: carol after the switch").count == 2, "shown once")

                for process in [pinged, hinted] {
                    process.closeInput()
                    #expect(try await process.waitForExit().status == 0)
                }
                await alice.leave()
                await proxy.stop()
            }
        }
    }

    @Test("chat: piped input is said, delivered before exit at end of input")
    func chatPiped() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let (reader, writer) = try await chatPair(server, room: "pipe", names: ("reader", "writer"))
                for i in 1...20 { writer.send("line \(i)") }
                writer.closeInput()
                #expect(try await writer.waitForExit().status == 0)
                let output = try await reader.waitForStdout("writer: line 20")
                let lines = output.stdout.split(separator: "\n").filter { $0.contains("writer: line") }.map {
                    $0.split(separator: ": ", maxSplits: 1).last.map(String.init) ?? ""
                }
                #expect(lines == (1...20).map { "line \($0)" })
                reader.send("/quit")
                #expect(try await reader.waitForExit().status == 0)
            }
        }
    }

    @Test("chat: a refused join exits 6; a bad --name is a usage error (64)")
    func chatRefused() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let refused = try await duplex("chat", server.webSocketURL("/chat/bad!room").absoluteString, "--name", "alice").waitForExit()
                #expect(refused.status == 6, "\(refused)")
                #expect(refused.stderr.hasPrefix("duplex: the server refused the join: invalid_room"))
                let usage = try await duplex("chat", server.webSocketURL("/chat/lobby").absoluteString, "--name", " alice").waitForExit()
                #expect(usage.status == 64, "\(usage)")
            }
        }
    }

    // MARK: echo

    @Test("echo: replies printed, 0 on a match, 1 on a mismatch, 2 on a timeout")
    func echo() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let ok = try await duplex("echo", server.webSocketURL("/echo").absoluteString, "one", "two words").waitForExit()
                #expect(ok.status == 0, "\(ok)")
                #expect(ok.stdout == "one\ntwo words\n")
                let binary = try await duplex("echo", "--binary", server.webSocketURL("/echo").absoluteString, "bytes").waitForExit()
                #expect(binary.status == 0, "\(binary)")
                // A chat room answers with a welcome frame, not the message.
                let mismatch = try await duplex("echo", server.webSocketURL("/chat/lobby?name=echo").absoluteString, "hello").waitForExit()
                #expect(mismatch.status == 1, "\(mismatch)")
                #expect(mismatch.stderr.contains("reply 1 does not match"))
                // Replies delayed past --timeout by a proxy's latency. The handshake is delayed too,
                // but it has the 10 s --connect-timeout; each reply has only 0.3 s.
                let proxy = try await FaultProxy.start(upstreamPort: server.port)
                defer { Task { await proxy.stop() } }
                proxy.add(.latency(.seconds(1)), direction: .downstream)
                let timedOut = try await duplex("echo", "--timeout", "0.3", "ws://127.0.0.1:\(proxy.port)/echo", "late").waitForExit()
                #expect(timedOut.status == 2, "\(timedOut)")
                #expect(timedOut.stderr.contains("no reply to message 1"))
            }
        }
    }

    @Test("errors: malformed URL 3, unreachable 4, HTTP 4xx to the handshake 6; one line on stderr")
    func connectionErrors() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let cases: [([String], Int32, String)] = [
                    (["echo", "ws://"], 3, "malformed URL"),
                    (
                        ["echo", "ftp://127.0.0.1:\(server.port)/echo"], 3,
                        "the scheme must be ws or wss (http and https are taken as ws and wss), not ftp"
                    ),
                    (["echo", "--timeout", "15", "http://127.0.0.1:\(server.port)/echo", "mapped"], 0, ""),
                    (["ws", "not a url"], 3, "malformed URL"),
                    (["listen", "ws://127.0.0.1/events"], 3, "the scheme must be http or https"),
                    (["proxy", "--listen", "nowhere", "--upstream", "127.0.0.1:1"], 3, "is not HOST:PORT"),
                    (["echo", "ws://127.0.0.1:1/echo"], 4, "could not connect"),
                    (["echo", "ws://no-such-host.invalid/echo"], 4, "could not resolve"),
                    (["listen", "--connect-timeout", "1", "http://127.0.0.1:1/events"], 4, "connection"),
                    (["echo", server.webSocketURL("/missing").absoluteString], 6, "HTTP 400"),
                    (["listen", server.httpURL("/missing").absoluteString], 6, "HTTP 404"),
                    (["listen", server.httpURL("/health").absoluteString], 6, "not text/event-stream"),
                    (["echo", "--timeout", "0", "ws://127.0.0.1/"], 64, "--timeout"),
                ]
                for (arguments, status, words) in cases {
                    let output = try await CLIProcess("duplex", arguments).waitForExit()
                    #expect(output.status == status, "\(arguments): \(output)")
                    #expect(words.isEmpty || output.stderr.contains(words), "\(arguments): \(output)")
                    if status != 64 && status != 0 {
                        #expect(output.stderr.hasPrefix("duplex: ") && output.stderr.split(separator: "\n").count == 1, "\(arguments): \(output)")
                    }
                }
            }
        }
    }

    @Test("TLS: an untrusted certificate exits 5; --ca and --insecure connect")
    func tls() async throws {
        let certificate = try await TestCertificate.make()
        let caFile = FileManager.default.temporaryDirectory.appendingPathComponent("duplex-cli-ca-\(UUID().uuidString).pem")
        try certificate.certificatePEM.write(to: caFile, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: caFile) }
        try await withTimeout(Self.limit) {
            let peer = try await ScriptedPeer.start(tls: certificate.serverContext)
            defer { Task { await peer.stop() } }
            let url = "wss://localhost:\(peer.port)/"
            let untrusted = try await duplex("echo", url, "secure").waitForExit()
            #expect(untrusted.status == 5, "\(untrusted)")
            #expect(untrusted.stderr.hasPrefix("duplex: TLS"))
            let trusted = try await duplex("echo", "--ca", caFile.path, url, "secure").waitForExit()
            #expect(trusted.status == 0, "\(trusted)")
            #expect(trusted.stdout == "secure\n")
            let insecure = try await duplex("echo", "--insecure", url, "secure").waitForExit()
            #expect(insecure.status == 0, "\(insecure)")
            let missing = try await duplex("echo", "--ca", "/nonexistent/ca.pem", url, "secure").waitForExit()
            #expect(missing.status == 5, "\(missing)")
        }
    }

    // MARK: ws

    @Test("ws: stdin lines become messages, replies go to stdout; end of input closes with 1000")
    func wsPiped() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let ws = try duplex("ws", server.webSocketURL("/echo").absoluteString)
                try await ws.waitForStderr("connected to")
                ws.send("first")
                ws.send("/not a command when piped")
                try await ws.waitForStdout("first\n/not a command when piped\n")
                ws.closeInput()
                let output = try await ws.waitForExit()
                #expect(output.status == 0, "\(output)")
                #expect(output.stderr.contains("closed: 1000"))

                // Input that ends at once: the replies already on their way are still printed.
                let burst = try duplex("ws", server.webSocketURL("/echo").absoluteString)
                for i in 1...50 { burst.send("line \(i)") }
                burst.closeInput()
                let all = try await burst.waitForExit()
                #expect(all.status == 0, "\(all)")
                #expect(all.stdout == (1...50).map { "line \($0)\n" }.joined())
            }
        }
    }

    @Test("ws --compress negotiates permessage-deflate and says so; a long line comes back whole")
    func wsCompress() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let ws = try duplex("ws", "--compress", "--protocol", "p1", server.webSocketURL("/echo").absoluteString)
                try await ws.waitForStderr("compression: permessage-deflate")
                let long = String(repeating: "squeeze ", count: 500)
                ws.send(long)
                try await ws.waitForStdout(long + "\n")
                ws.closeInput()
                let output = try await ws.waitForExit()
                #expect(output.status == 0, "\(output)")
                #expect(output.stderr.contains("(protocol p1)"), "\(output.stderr)")
            }
            try await withDuplexServer(configuration: .init(compression: nil)) { server in
                let ws = try duplex("ws", "--compress", server.webSocketURL("/echo").absoluteString)
                try await ws.waitForStderr("compression: declined by the server")
                ws.closeInput()
                #expect(try await ws.waitForExit().status == 0)
            }
        }
    }

    @Test("ws --commands: /ping prints a round trip, /close CODE REASON closes with them")
    func wsCommands() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let ws = try duplex("ws", "--commands", server.webSocketURL("/echo").absoluteString)
                try await ws.waitForStderr("connected to")
                ws.send("/ping")
                try await ws.waitForStderr("pong in")
                ws.send("//slash")
                try await ws.waitForStdout("/slash\n")
                ws.send("/close 9999")
                try await ws.waitForStderr("usage: /close")
                ws.send("/close 4001 done here")
                let output = try await ws.waitForExit()
                #expect(output.status == 0, "\(output)")
                #expect(output.stderr.contains("closed: 4001 done here"))
            }
        }
    }

    @Test("ws: the server's close code and reason are printed; an error code exits 1, a lost connection 7")
    func wsServerClose() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let ws = try duplex("ws", server.webSocketURL("/echo").absoluteString)
                ws.send("warm")
                try await ws.waitForStdout("warm")
                _ = server.server.closeConnections(.route("echo"), code: WebSocketCloseCode(4000), reason: "go away")
                let closed = try await ws.waitForExit()
                #expect(closed.status == 1, "\(closed)")
                #expect(closed.stderr.contains("closed by the server: 4000 go away"))

                let dropped = try duplex("ws", server.webSocketURL("/echo").absoluteString)
                dropped.send("warm")
                try await dropped.waitForStdout("warm")
                _ = server.server.dropConnections(.route("echo"))
                let lost = try await dropped.waitForExit()
                #expect(lost.status == 7, "\(lost)")
            }
        }
    }

    @Test("ws --max-message-bytes: a larger message closes with 1009 and exits 7; --binary sends binary")
    func wsLimits() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let binary = try duplex("ws", "--binary", server.webSocketURL("/echo").absoluteString)
                binary.send("raw")
                // Binary replies print as base64.
                try await binary.waitForStdout(Data("raw".utf8).base64EncodedString())
                binary.closeInput()
                #expect(try await binary.waitForExit().status == 0)

                let small = try duplex("ws", "--max-message-bytes", "16", server.webSocketURL("/echo").absoluteString)
                small.send(String(repeating: "x", count: 64))
                let output = try await small.waitForExit()
                #expect(output.status == 7, "\(output)")
            }
        }
    }

    @Test("ws --ping-interval: a blackholed path fails the pings and exits 7")
    func wsPingFailure() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let proxy = try await FaultProxy.start(upstreamPort: server.port)
                defer { Task { await proxy.stop() } }
                let ws = try duplex("ws", "--ping-interval", "0.4", "ws://127.0.0.1:\(proxy.port)/echo")
                try await ws.waitForStderr("connected to")
                proxy.add(.blackhole, direction: .both)
                let output = try await ws.waitForExit()
                #expect(output.status == 7, "\(output)")
                #expect(output.stderr.contains("pings in a row went unanswered"))
            }
        }
    }

    @Test("ws --preamble sends its texts first, in order, before any line of stdin")
    func wsPreamble() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let ws = try duplex("ws", "--preamble", "hello", "--preamble", "token", server.webSocketURL("/echo").absoluteString)
                ws.send("line")
                _ = try await ws.wait("three echoes", within: .seconds(10)) { $0.stdout.split(separator: "\n").count >= 3 }
                ws.closeInput()
                let output = try await ws.waitForExit()
                #expect(output.status == 0, "\(output)")
                #expect(output.stdout == "hello\ntoken\nline\n", "\(output)")
            }
        }
    }

    // MARK: listen

    @Test("listen --json prints one object per event; --last-event-id resumes after that id")
    func listen() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let url = server.httpURL("/events?interval=20").absoluteString
                let first = try await duplex("listen", "--json", "--max-events", "3", url).waitForExit()
                #expect(first.status == 0, "\(first)")
                let objects = try first.stdout.split(separator: "\n").map {
                    try #require(try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
                }
                #expect(objects.count == 3)
                #expect(objects.allSatisfy { $0["event"] as? String == "tick" && $0["data"] is String && $0["id"] is String && $0["retry"] == nil })
                let ids = objects.compactMap { ($0["id"] as? String).flatMap(Int.init) }
                #expect(ids == [ids[0], ids[0] + 1, ids[0] + 2])

                let resumed = try await duplex("listen", "--json", "--max-events", "2", "--last-event-id", String(ids[0]), url).waitForExit()
                let resumedIDs = resumed.stdout.split(separator: "\n").compactMap {
                    (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["id"] as? String
                }
                #expect(resumedIDs == [String(ids[0] + 1), String(ids[0] + 2)], "\(resumed)")

                let plain = try await duplex("listen", "--max-events", "1", url).waitForExit()
                #expect(plain.stdout.hasPrefix("tick "), "\(plain)")
            }
        }
    }

    @Test("listen -X POST -d sends the body; --until exits 0 after that event; a drop exits 7 and is not sent again; a refusal exits 6 with its body")
    func listenPost() async throws {
        try await withTimeout(Self.limit) {
            let peer = try await ScriptedHTTPPeer.start { n in
                switch n {
                case 1: .init(chunks: ["data: {\"text\":\"hi\"}\n\n", "data: [DONE]\n\n"], stall: true)
                case 2: .init(chunks: ["id: 1\ndata: part\n\n"], drop: true)
                case 3:
                    .init(
                        status: .tooManyRequests, headers: [("Retry-After", "2"), ("Content-Type", "application/json")],
                        chunks: ["{\"error\":\n\"slow\u{1b}[2J down\"}"])
                default: .init(chunks: ["data: x\n\n"])
                }
            }
            defer { Task { await peer.stop() } }
            let url = "http://127.0.0.1:\(peer.port)/v1/complete"
            let done = try await duplex(
                "listen", "-X", "POST", "-H", "Content-Type: application/json", "-d", #"{"prompt":"hi"}"#, "--until", "[DONE]", url
            ).waitForExit()
            #expect(done.status == 0, "\(done)")
            #expect(done.stdout == "message - {\"text\":\"hi\"}\nmessage - [DONE]\n", "\(done)")
            let first = try #require(peer.received.first)
            #expect(first.method == .POST && first.body == #"{"prompt":"hi"}"# && first.headers["Content-Type"] == ["application/json"])

            let dropping = try duplex("listen", "-d", "@-", url)
            dropping.send("prompt=from stdin")
            dropping.closeInput()
            let dropped = try await dropping.waitForExit()
            #expect(dropped.status == 7, "a drop of a POST stream is a lost connection: \(dropped)")
            #expect(dropped.stdout == "message 1 part\n")
            #expect(peer.received.count == 2, "not sent again")
            #expect(
                peer.received.last?.headers["Content-Type"] == ["application/x-www-form-urlencoded"], "-d without a Content-Type, as curl sends it")
            #expect(peer.received.last?.body == "prompt=from stdin\n", "-d @- reads stdin")

            let refused = try await duplex("listen", "-X", "POST", url).waitForExit()
            #expect(refused.status == 6, "\(refused)")
            #expect(
                refused.stderr.contains("HTTP 429 (Retry-After: 2); its body:\n{\"error\":\n\"slow^[[2J down\"}"),
                "the body's lines, control characters made visible: \(refused)")
            #expect(peer.received.count == 3)

            let usage = try await duplex("listen", "-X", "GET", "-d", "x", url).waitForExit()
            #expect(usage.status == 64)
            #expect(peer.received.count == 3)
        }
    }

    @Test("listen reports a lost stream on stderr, reconnects, and goes on with the next event")
    func listenReconnects() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer(configuration: .init(sseRetryMilliseconds: 50)) { server in
                let listen = try duplex("listen", "--json", server.httpURL("/events?interval=20").absoluteString)
                let before = try await listen.waitForStdout("\n")
                #expect(!before.stdout.isEmpty)
                _ = server.server.dropConnections(.route("events"))
                try await listen.waitForStderr("reconnecting")
                try await listen.waitForStderr("reconnected")
                let count = listen.output.stdout.split(separator: "\n").count
                _ = try await listen.wait("more events", within: .seconds(10)) { $0.stdout.split(separator: "\n").count > count + 2 }
                let ids = listen.output.stdout.split(separator: "\n").compactMap {
                    (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["id"] as? String
                }.compactMap(Int.init)
                // Resumed with Last-Event-ID: consecutive ids, no gap, no repeat.
                #expect(ids == Array(ids[0]..<(ids[0] + ids.count)))
                listen.signal(SIGTERM)
                _ = try await listen.waitForExit()
            }
        }
    }

    // MARK: proxy

    @Test(
        "proxy --scenario: each step prints a line as it takes effect, the scenario's seed is the proxy's; a step the server refuses ends it with status 1; a wrong file is refused before it starts"
    )
    func proxyScenario() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let files = try ScratchFiles("duplex-scenario")
                defer { files.remove() }
                let file = files.write
                let good = try file(
                    "good.json", #"{"seed": 9, "steps": [{"at": 0, "add": {"type": "latency", "ms": 1}}, {"at": 0.3, "heal": true}]}"#)
                let proxy = try duplex("proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:\(server.port)", "--scenario", good)
                let done = try await proxy.waitForStdout("duplex proxy scenario: done after 300 ms")
                #expect(done.stdout.contains("duplex proxy seed 9 "), "\(done)")
                #expect(done.stdout.contains("duplex proxy scenario 0 s: step 1: add latency 1 ms (both)\n"), "\(done)")
                #expect(done.stdout.contains("duplex proxy scenario 300 ms: step 2: heal (every toxic removed)\n"), "\(done)")
                proxy.signal(SIGTERM)
                #expect(try await proxy.waitForExit().status == 0, "the proxy serves on after its scenario, until a signal")

                // This server has no /_chaos/ routes.
                let refused = try file("refused.json", #"{"steps": [{"at": 0, "chaos": "drop"}]}"#)
                let failing = try await duplex("proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:\(server.port)", "--scenario", refused)
                    .waitForExit()
                #expect(failing.status == 1, "\(failing)")
                #expect(
                    failing.stderr.contains("scenario: step 1 failed: chaos drop: the server answered 404 (is it running with --chaos?)"),
                    "\(failing)")

                let wrong = try file("wrong.json", #"{"steps": [{"at": 0, "heal": false}]}"#)
                let invalid = try await duplex("proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:\(server.port)", "--scenario", wrong)
                    .waitForExit()
                #expect(invalid.status == 64, "\(invalid)")
                #expect(invalid.stderr.contains("--scenario: \(wrong): step 1: heal takes true"), "\(invalid)")
            }
        }
    }

    // MARK: intercept

    @Test(
        "intercept proxies to a real backend through a rules file, printing each message with where it went and what a rule did; SIGTERM exits 0; a bad rules file exits 64 with its place"
    )
    func intercept() async throws {
        try await withTimeout(Self.limit) {
            let files = try ScratchFiles("duplex-intercept")
            defer { files.remove() }
            let rules = try files.write(
                "rules.json", #"{"toUpstream": [{"match": {"text": "ping"}, "do": [{"reply": "pong"}, {"forward": false}]}]}"#)
            try await withDuplexServer { backend in
                let intercept = try duplex("intercept", "--listen", "127.0.0.1:0", "--upstream", "ws://127.0.0.1:\(backend.port)", "--rules", rules)
                let ready = try await intercept.waitForStdout("duplex intercept listening on 127.0.0.1:")
                let port = try #require(ready.stdout.split(separator: ":").dropFirst().first.flatMap { Int($0.prefix { $0.isNumber }) })
                #expect(ready.stdout.contains("forwarding to ws://127.0.0.1:\(backend.port); journal at http://127.0.0.1:\(port)/_journal"))
                let echoed = try await duplex("echo", "ws://127.0.0.1:\(port)/echo", "hello").waitForExit()
                #expect(echoed.status == 0, "\(echoed)")
                #expect(echoed.stdout == "hello\n")
                let replied = try await duplex("echo", "ws://127.0.0.1:\(port)/echo", "ping").waitForExit()
                #expect(replied.status == 1, "the rule answered pong: \(replied)")
                let printed = try await intercept.waitForStdout(#"#2 to client     text "pong"  (replied)"#)
                for line in [
                    "#1 open /echo", #"#1 from client   text "hello"  [forward]"#, #"#1 to upstream   text "hello"  (forwarded)"#,
                    #"#1 from upstream text "hello"  [forward]"#, #"#1 to client     text "hello"  (forwarded)"#,
                    #"#2 from client   text "ping"  [on text "ping": reply "pong", hold back]"#,
                ] {
                    #expect(printed.stdout.contains(line), "\(line) in \(printed)")
                }
                #expect(!printed.stdout.contains(#"#2 to upstream   text "ping""#))
                intercept.signal(SIGTERM)
                let ended = try await intercept.waitForExit()
                #expect(ended.status == 0, "\(ended)")
            }
            let bad = try files.write("bad.json", #"{"toClient": [{"match": {"nth": 0}, "do": []}]}"#)
            let invalid = try await duplex("intercept", "--listen", "127.0.0.1:0", "--upstream", "ws://127.0.0.1:1", "--rules", bad).waitForExit()
            #expect(invalid.status == 64, "\(invalid)")
            #expect(invalid.stderr.contains("--rules: toClient[0].match.nth: must be a whole number from 1"), "\(invalid)")
            let notWS = try await duplex("intercept", "--upstream", "http://127.0.0.1:1").waitForExit()
            #expect(notWS.status == 64, "\(notWS)")
        }
    }

    // MARK: replay

    @Test(
        "replay serves a cassette: duplex echo gets the recorded reply; a mismatch is printed with both sides and makes the exit status 1; a wrong file is refused with its line"
    )
    func replay() async throws {
        try await withTimeout(Self.limit) {
            let files = try ScratchFiles("duplex-replay")
            defer { files.remove() }
            let file = files.write
            let good = try file(
                "echo.cassette",
                """
                {"duplex-cassette":1}
                {"open":{"kind":"websocket","path":"/echo"},"session":1}
                {"at":0.01,"from":"client","session":1,"text":"hello"}
                {"at":0.02,"from":"server","session":1,"text":"hello"}
                {"at":0.03,"close":{"code":1000,"reason":""},"from":"client","session":1}

                """
            )
            let replay = try duplex("replay", good, "--listen", "127.0.0.1:0", "--no-delays")
            let ready = try await replay.waitForStdout("duplex replay listening on 127.0.0.1:")
            #expect(ready.stdout.contains(": 1 session (WebSocket /echo)\n"), "\(ready)")
            let port = try #require(ready.stdout.split(separator: ":").dropFirst().first.flatMap { Int($0) })
            let echoed = try await duplex("echo", "ws://127.0.0.1:\(port)/echo", "hello").waitForExit()
            #expect(echoed.status == 0, "\(echoed)")
            #expect(echoed.stdout == "hello\n")
            let wrong = try await duplex("echo", "ws://127.0.0.1:\(port)/echo", "hullo").waitForExit()
            #expect(wrong.status != 0)
            let report = try await replay.waitForStderr("received: client text \"hullo\"")
            #expect(report.stderr.contains("replay mismatch in session 1 (/echo), step 1:\n  recorded: client text \"hello\"\n"), "\(report)")
            replay.signal(SIGTERM)
            let ended = try await replay.waitForExit()
            #expect(ended.status == 1, "\(ended)")
            #expect(ended.stderr.contains("duplex: 1 replay mismatch"), "\(ended)")

            let bad = try file("bad.cassette", "{\"duplex-cassette\":1}\n{\"at\":0,\"session\":1,\"from\":\"client\",\"text\":\"x\"}\n")
            let invalid = try await duplex("replay", bad, "--listen", "127.0.0.1:0").waitForExit()
            #expect(invalid.status == 64, "\(invalid)")
            #expect(invalid.stderr.contains("\(bad): cassette line 2: session 1 has a step before its open line"), "\(invalid)")

            // The server's own routes beside a cassette are duplex-server's: the CLI says where.
            let builtIn = try await duplex("replay", good, "--listen", "127.0.0.1:0", "--built-in-routes").waitForExit()
            #expect(builtIn.status == 64, "\(builtIn)")
            #expect(builtIn.stderr.contains("duplex-server --replay \(good)"), "\(builtIn)")
        }
    }

    @Test("duplex-server --replay serves the cassette's paths first and its own routes beside them; a bad file is refused at start")
    func serverReplay() async throws {
        try await withTimeout(Self.limit) {
            let files = try ScratchFiles("duplex-server-replay")
            defer { files.remove() }
            let cassette = try files.write(
                "events.cassette",
                """
                {"duplex-cassette":1}
                {"open":{"kind":"websocket","path":"/echo"},"session":1}
                {"at":0.01,"from":"client","session":1,"text":"hello"}
                {"at":0.02,"from":"server","session":1,"text":"recorded"}
                {"at":0.03,"close":{"code":1000,"reason":""},"from":"client","session":1}

                """
            )
            let (server, port) = try await CLIProcess.server(["--replay", cassette])
            defer { server.signal(SIGTERM) }
            // /echo is the cassette's: the recorded reply, not an echo.
            let replayed = try await duplex("echo", "ws://127.0.0.1:\(port)/echo", "hello").waitForExit()
            #expect(replayed.stdout == "recorded\n", "\(replayed)")
            // The built-in routes answer where the cassette has nothing.
            let health = try await HTTPProbe.get(port: port, "/health")
            #expect(health.hasPrefix("HTTP/1.1 200") && health.contains(#""status":"ok""#), "\(health)")

            let bad = try files.write("bad.cassette", "not a cassette\n")
            let refused = try await CLIProcess("duplex-server", ["--port", "0", "--replay", bad]).waitForExit()
            #expect(refused.status == 64 && refused.stderr.contains("--replay: \(bad)"), "\(refused)")
        }
    }

    @Test("proxy forwards, applies flag toxics, and its control endpoint adds, lists and removes toxics; it prints its seed, and takes one")
    func proxy() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let proxy = try duplex(
                    "proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:\(server.port)", "--latency", "1", "--seed", "1234")
                let ready = try await proxy.waitForStdout("duplex proxy control on http://")
                #expect(ready.stdout.contains("duplex proxy seed 1234 (--seed 1234 makes the same random choices again)"), "\(ready.stdout)")
                let listenPort = try #require(Self.port(after: "listening on 127.0.0.1:", in: ready.stdout))
                let controlPort = try #require(Self.port(after: "control on http://127.0.0.1:", in: ready.stdout))
                let control = "http://127.0.0.1:\(controlPort)"

                let listed = try await Self.http("GET", "\(control)/toxics")
                #expect(listed.status == 200)
                #expect(listed.body.contains(#""type":"latency""#) && listed.body.contains(#""ms":1"#), "\(listed.body)")
                #expect(listed.body.contains(#""seed":"1234""#), "\(listed.body)")

                let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(listenPort)/echo")!)
                let messages = socket.messages
                try await socket.connect()
                try await socket.send("through the proxy")
                #expect(try await messages.first(within: .seconds(10)).text == "through the proxy")

                let added = try await Self.http("POST", "\(control)/toxics?type=blackhole&direction=downstream")
                #expect(added.status == 201, "\(added.body)")
                await #expect(throws: WebSocketError.self) { _ = try await socket.ping(timeout: .milliseconds(300)) }
                let removed = try await Self.http("DELETE", "\(control)/toxics")
                #expect(removed.status == 200)
                #expect(try await socket.ping(timeout: .seconds(5)) > .zero)

                let bad = try await Self.http("POST", "\(control)/toxics?type=latency")
                #expect(bad.status == 400 && bad.body.contains("needs ms"), "\(bad.body)")
                let tooLong = try await Self.http("POST", "\(control)/toxics?type=latency&ms=99999999999999999")
                #expect(tooLong.status == 400 && tooLong.body.contains("ms must be an integer from 0 to 86400000"), "\(tooLong.body)")
                let tooToxic = try await Self.http("POST", "\(control)/toxics?type=blackhole&toxicity=1.5")
                #expect(tooToxic.status == 400 && tooToxic.body.contains("toxicity must be a number from 0 to 1"), "\(tooToxic.body)")
                let half = try await Self.http("POST", "\(control)/toxics?type=latency&ms=5&toxicity=0.5")
                #expect(half.status == 201, "\(half.body)")
                #expect(try await Self.http("GET", "\(control)/toxics").body.contains(#""toxicity":0.5"#))
                let unknown = try await Self.http("DELETE", "\(control)/toxics/999")
                #expect(unknown.status == 404)
                _ = try await Self.http("DELETE", "\(control)/toxics")

                // A path switch: the open connection goes half-open, a new one echoes, and the
                // control endpoint lists the first as severed.
                let switched = try await Self.http("POST", "\(control)/toxics?type=path-switch")
                #expect(switched.status == 201, "\(switched.body)")
                await #expect(throws: WebSocketError.self) { _ = try await socket.ping(timeout: .milliseconds(300)) }
                let fresh = WebSocket(url: URL(string: "ws://127.0.0.1:\(listenPort)/echo")!)
                try await fresh.connect()
                #expect(try await fresh.ping(timeout: .seconds(5)) > .zero)
                let connections = try await Self.http("GET", "\(control)/connections")
                #expect(connections.status == 200)
                #expect(connections.body.contains(#""id":1"#) && connections.body.contains(#""severed":true"#), "\(connections.body)")
                #expect(connections.body.contains(#""id":2"#) && connections.body.contains(#""severed":false"#), "\(connections.body)")
                let suspended = try await Self.http("POST", "\(control)/toxics?type=suspend&ms=200&connections=2")
                #expect(suspended.status == 201, "\(suspended.body)")
                #expect(try await fresh.ping(timeout: .seconds(5)) >= .milliseconds(150), "held until the suspension ended")
                let badScope = try await Self.http("POST", "\(control)/toxics?type=blackhole&connections=0")
                #expect(badScope.status == 400 && badScope.body.contains("connections must be all, open, new"), "\(badScope.body)")
                await fresh.terminate()

                await socket.terminate()
                proxy.signal(SIGTERM)
                #expect(try await proxy.waitForExit().status == 0)
            }
        }
    }

    @Test(
        "proxy --profile shapes the link as a named profile; the control endpoint adds one by name, and 100-loss holds data until removed; an unknown name is refused"
    )
    func proxyProfile() async throws {
        try await withTimeout(Self.limit) {
            try await withDuplexServer { server in
                let refused = try await duplex("proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:\(server.port)", "--profile", "5g")
                    .waitForExit()
                #expect(refused.status == 64, "\(refused)")
                #expect(
                    refused.stderr.contains("--profile must be one of 3g, edge, lte, dsl, wifi, lossy-wifi, very-bad-network, 100-loss, not \"5g\""),
                    "\(refused)")

                let proxy = try duplex("proxy", "--listen", "127.0.0.1:0", "--upstream", "127.0.0.1:\(server.port)", "--profile", "3g")
                let ready = try await proxy.waitForStdout("duplex proxy control on http://")
                let listenPort = try #require(Self.port(after: "listening on 127.0.0.1:", in: ready.stdout))
                let controlPort = try #require(Self.port(after: "control on http://127.0.0.1:", in: ready.stdout))
                let control = "http://127.0.0.1:\(controlPort)"
                #expect(try await Self.http("GET", "\(control)/toxics").body.contains(#""name":"3g""#))

                let socket = WebSocket(url: URL(string: "ws://127.0.0.1:\(listenPort)/echo")!)
                try await socket.connect()
                #expect(try await socket.ping(timeout: .seconds(5)) >= .milliseconds(200), "3g: 100 ms each way")
                _ = try await Self.http("DELETE", "\(control)/toxics")
                #expect(try await Self.http("GET", "\(control)/toxics").body.contains(#""toxics":[]"#))

                let lost = try await Self.http("POST", "\(control)/toxics?type=profile&name=100-loss")
                #expect(lost.status == 201, "\(lost.body)")
                let held = socket.messages
                try await socket.send("held")
                await #expect(throws: WebSocketError.self) { _ = try await socket.ping(timeout: .milliseconds(300)) }
                _ = try await Self.http("DELETE", "\(control)/toxics")
                #expect(try await held.first(within: .seconds(10)).text == "held", "delivered once the link is back")

                let unknown = try await Self.http("POST", "\(control)/toxics?type=profile&name=5g")
                #expect(unknown.status == 400 && unknown.body.contains("name must be one of 3g, edge"), "\(unknown.body)")
                await socket.terminate()
                proxy.signal(SIGTERM)
                #expect(try await proxy.waitForExit().status == 0)
            }
        }
    }

    static func port(after marker: String, in text: String) -> Int? {
        guard let range = text.range(of: marker) else { return nil }
        return Int(text[range.upperBound...].prefix { $0.isNumber })
    }

    static func http(_ method: String, _ url: String) async throws -> (status: Int, body: String) {
        var request = URLRequest(url: URL(string: url)!)
        request.httpMethod = method
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }
}
