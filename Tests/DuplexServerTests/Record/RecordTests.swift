import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import NIOHTTP1
import TestSupport
import Testing

@testable import Duplex

/// Recording (issue 33): sessions through a recording server into a cassette, then replayed.
@Suite("record")
struct RecordTests {
    static let wait: Duration = .seconds(20)

    /// Runs a recording server in front of `upstream` for the duration of `body`.
    static func withRecorder<Result: Sendable>(
        upstream: URL,
        redact: Set<String> = [],
        tlsTrust: TLSTrust = .systemRoots,
        recorder: CassetteRecorder = CassetteRecorder(),
        _ body: (RunningDuplexServer, CassetteRecorder) async throws -> Result
    ) async throws -> Result {
        var configuration = DuplexServerConfiguration()
        configuration.record = RecordConfiguration(upstream: upstream, recorder: recorder, redact: redact, tlsTrust: tlsTrust)
        return try await withDuplexServer(configuration: configuration) { try await body($0, recorder) }
    }

    /// Checks that a recorder whose upstream cannot be reached (or not trusted) answers a
    /// WebSocket upgrade and an SSE request with 502, and records nothing.
    static func expectUnreachable(_ server: RunningDuplexServer, _ recorder: CassetteRecorder) async throws {
        let socket = WebSocket(url: server.webSocketURL("/echo"))
        let refused = await #expect(throws: WebSocketError.self) { try await socket.connect() }
        #expect(refused?.status == 502)
        #expect(refused?.body?.contains("upstream") == true, "\(String(describing: refused))")
        await socket.terminate()
        let sse = ServerSentEventManager(url: server.httpURL("/events"), retryPolicy: .none)
        await #expect { try await sse.connect() } throws: { ($0 as? SSEError)?.status == 502 }
        await sse.terminate()
        #expect(try recorder.cassette().sessions.isEmpty)
    }

    /// Sends `a`, `b` and 3 bytes on `socket`, reads the three echoes, and closes with 1000 "bye".
    static func echoSession(_ socket: WebSocket) async throws -> [WebSocketMessage] {
        let messages = socket.messages
        try await socket.connect()
        try await socket.send("a")
        try await socket.send("b")
        try await socket.send(Data([1, 2, 3]))
        var received: [WebSocketMessage] = []
        for await message in messages {
            received.append(message)
            if received.count == 3 { break }
        }
        await socket.disconnect(code: .normalClosure, reason: "bye")
        return received
    }

    @Test(
        "a WebSocket session recorded into a file as it happens: each side's messages in order with their times, secrets redacted, the client's close; replayed, the same"
    )
    func webSocketRecordAndReplay() async throws {
        let files = try ScratchFiles("duplex-record")
        defer { files.remove() }
        let path = files.directory.appendingPathComponent("session.cassette").path
        let fileRecorder = try CassetteRecorder(writingTo: path)
        try await withTimeout(Self.wait) {
            let cassette = try await withDuplexServer { upstream in
                try await Self.withRecorder(upstream: upstream.webSocketURL("/"), redact: ["X-Token"], recorder: fileRecorder) {
                    recorderServer, recorder in
                    let socket = WebSocket(
                        request: WebSocketRequest(
                            url: recorderServer.webSocketURL("/echo"),
                            protocols: ["first.v1", "second.v1"],
                            additionalHeaders: ["Authorization": "Bearer secret", "X-Token": "t0k3n", "X-Plain": "kept"]
                        ),
                        configuration: .init(compression: PerMessageDeflate())
                    )
                    let echoed = try await Self.echoSession(socket)
                    #expect(echoed == [.string("a"), .string("b"), .data(Data([1, 2, 3]))])
                    // In the file already, while the recorder runs on.
                    let written = try String(contentsOfFile: path, encoding: .utf8)
                    #expect(written.hasPrefix(#"{"duplex-cassette":1}"# + "\n"))
                    #expect(written.contains(#""from":"client","session":1,"text":"b"}"#))
                    return try recorder.cassette()
                }
            }
            let session = try #require(cassette.sessions.first)
            #expect(cassette.sessions.count == 1)
            #expect(session.kind == .webSocket && session.path == "/echo")
            #expect(session.subprotocol == "first.v1", "the upstream's choice (/echo picks the first offered)")
            #expect(session.extensions?.hasPrefix("permessage-deflate") == true, "what the upstream agreed to: \(session.extensions ?? "none")")
            let headers = Dictionary(session.headers.map { ($0.name.lowercased(), $0.value) }) { first, _ in first }
            #expect(headers["authorization"] == "[redacted]")
            #expect(headers["x-token"] == "[redacted]")
            #expect(headers["x-plain"] == "kept")
            #expect(headers["sec-websocket-key"] == nil)
            // Each side's messages in order, each echo after the message it answers (the
            // client may send its next before the echo of the last arrives).
            let actions = session.steps.map(\.action)
            let sent: [Cassette.Message] = [.text("a"), .text("b"), .binary(Data([1, 2, 3]))]
            let fromClient = actions.compactMap { if case .message(.client, let message) = $0 { message } else { nil } }
            let fromServer = actions.compactMap { if case .message(.server, let message) = $0 { message } else { nil } }
            #expect(fromClient == sent && fromServer == sent, "\(actions)")
            for message in sent {
                let asked = try #require(actions.firstIndex(of: .message(.client, message)))
                let answered = try #require(actions.firstIndex(of: .message(.server, message)))
                #expect(asked < answered, "\(actions)")
            }
            #expect(zip(session.steps, session.steps.dropFirst()).allSatisfy { $0.at <= $1.at }, "times only go forward")
            #expect(session.steps.last?.action == .close(.client, code: 1000, reason: "bye"))

            // The cassette as a file holds, and the client meets the recorded server.
            let replayed = try Cassette(jsonLines: cassette.encoded())
            #expect(replayed.sessions.map(\.steps.count) == cassette.sessions.map(\.steps.count))
            try await withReplayServer(replayed) { server in
                let echoed = try await Self.echoSession(WebSocket(url: server.webSocketURL("/echo")))
                #expect(echoed == [.string("a"), .string("b"), .data(Data([1, 2, 3]))])
            }
        }
    }

    @Test("a client that sends and closes at once, before the upstream answered: every session keeps its messages and its close")
    func sendAndCloseAtOnce() async throws {
        try await withTimeout(Self.wait) {
            try await withDuplexServer { upstream in
                try await Self.withRecorder(upstream: upstream.webSocketURL("/")) { recorderServer, recorder in
                    for _ in 0..<6 {
                        let socket = WebSocket(url: recorderServer.webSocketURL("/echo"))
                        try await socket.connect()
                        try await socket.send("a")
                        try await socket.send("b")
                        await socket.disconnect(code: .normalClosure, reason: "bye")
                    }
                    let sessions = try recorder.cassette().sessions
                    #expect(sessions.count == 6)
                    for session in sessions {
                        let actions = session.steps.map(\.action)
                        let fromClient = actions.compactMap { if case .message(.client, let message) = $0 { message } else { nil } }
                        #expect(fromClient == [.text("a"), .text("b")], "\(actions)")
                        #expect(actions.contains(.close(.client, code: 1000, reason: "bye")), "\(actions)")
                    }
                }
            }
        }
    }

    @Test("an SSE stream through the recorder: its query and events recorded; replayed, the client gets the same events")
    func eventStreamRecordAndReplay() async throws {
        try await withTimeout(Self.wait) {
            let (seen, cassette) = try await withDuplexServer { upstream in
                try await Self.withRecorder(upstream: upstream.httpURL("/")) { recorderServer, recorder in
                    let sse = ServerSentEventManager(url: recorderServer.httpURL("/events?interval=20"), retryPolicy: .none)
                    let events = sse.events
                    try await sse.connect()
                    var seen: [ServerSentEvent] = []
                    for await event in events {
                        seen.append(event)
                        if seen.count == 3 { break }
                    }
                    await sse.terminate()
                    return (seen, try recorder.cassette())
                }
            }
            let session = try #require(cassette.sessions.first)
            #expect(session.kind == .eventStream && session.path == "/events" && session.query == "interval=20")
            let recorded = session.steps.compactMap { if case .event(let event) = $0.action { event } else { nil } }
            #expect(Array(recorded.prefix(3)) == seen, "the events the client got, as the upstream sent them")

            try await withReplayServer(cassette) { server in
                let sse = ServerSentEventManager(url: server.httpURL("/events"), retryPolicy: .none)
                let events = sse.events
                try await sse.connect()
                var replayed: [ServerSentEvent] = []
                for await event in events {
                    replayed.append(event)
                    if replayed.count == 3 { break }
                }
                #expect(replayed == seen)
                await sse.terminate()
            }
        }
    }

    @Test(
        "a POST stream through the recorder: its method and body forwarded and recorded; replayed strictly, the same request gets the events, another body is 400 with both sides"
    )
    func postStreamRecordAndReplay() async throws {
        try await withTimeout(Self.wait) {
            let peer = try await ScriptedHTTPPeer.start { _ in .init(chunks: ["data: {\"text\":\"hi\"}\n\n", "data: [DONE]\n\n"]) }
            defer { Task { await peer.stop() } }
            let body = Data(#"{"prompt":"hi"}"#.utf8)
            let request = { (url: URL) in
                SSERequest(url: url, method: .post, body: body, additionalHeaders: ["Content-Type": "application/json"], terminalEvent: .done)
            }
            let (seen, cassette) = try await Self.withRecorder(upstream: URL(string: "http://127.0.0.1:\(peer.port)/")!) { recorderServer, recorder in
                let sse = ServerSentEventManager(request: request(recorderServer.httpURL("/v1/completions")), retryPolicy: .none)
                let events = sse.events
                try await sse.connect()
                var seen: [String] = []
                for await event in events { seen.append(event.data) }
                return (seen, try recorder.cassette())
            }
            #expect(seen == [#"{"text":"hi"}"#, "[DONE]"])
            let upstreamRequest = try #require(peer.received.first)
            #expect(upstreamRequest.method == .POST && upstreamRequest.body == #"{"prompt":"hi"}"#, "forwarded with its method and body")
            let session = try #require(cassette.sessions.first)
            #expect(session.kind == .eventStream && session.method == "POST" && session.body == body)
            let reread = try Cassette(jsonLines: cassette.encoded())
            #expect(reread.sessions.first?.method == "POST" && reread.sessions.first?.body == body, "the file keeps the method and body")

            // The differing request is a mismatch: withReplayServer throws it once its body ends.
            var thrown: ReplayMismatches?
            do {
                try await withReplayServer(cassette) { server in
                    let same = ServerSentEventManager(request: request(server.httpURL("/v1/completions")), retryPolicy: .none)
                    let events = same.events
                    try await same.connect()
                    var replayed: [String] = []
                    for await event in events { replayed.append(event.data) }
                    #expect(replayed == seen)

                    var other = request(server.httpURL("/v1/completions"))
                    other.body = Data(#"{"prompt":"bye"}"#.utf8)
                    let differing = ServerSentEventManager(request: other, retryPolicy: .none)
                    let error = await #expect(throws: SSEError.self) { try await differing.connect() }
                    #expect(error?.status == 400)
                    let said = error?.response?.text ?? ""
                    #expect(said.contains("step 0") && said.contains("prompt") && said.contains("bye"), "the answer says what differed: \(said)")
                    let mismatch = try #require(server.mismatches.first)
                    #expect(mismatch.step == 0)
                    #expect(mismatch.recorded == #"request POST with body text "{\"prompt\":\"hi\"}""#)
                    #expect(mismatch.received == #"request POST with body text "{\"prompt\":\"bye\"}""#)
                }
            } catch let mismatches as ReplayMismatches {
                thrown = mismatches
            }
            #expect(thrown?.mismatches.count == 1)
        }
    }

    @Test(
        "a TLS upstream (wss:// and https://), trusted through the CA it made: the session and the stream are recorded; an untrusted one is 502 to both"
    )
    func tlsUpstream() async throws {
        let tls = try DuplexServerTLS.selfSigned()
        let ca = try #require(tls.certificateAuthorityPEM)
        var tlsConfiguration = DuplexServerConfiguration(tickInterval: .milliseconds(20))
        tlsConfiguration.tls = tls
        let configuration = tlsConfiguration
        try await withTimeout(Self.wait) {
            try await withDuplexServer(configuration: configuration) { upstream in
                let cassette = try await Self.withRecorder(upstream: upstream.webSocketURL("/"), tlsTrust: .certificateAuthority(pem: ca)) {
                    server, recorder in
                    let echoed = try await Self.echoSession(WebSocket(url: server.webSocketURL("/echo")))
                    #expect(echoed == [.string("a"), .string("b"), .data(Data([1, 2, 3]))])
                    let sse = ServerSentEventManager(url: server.httpURL("/events"), retryPolicy: .none)
                    let events = sse.events
                    try await sse.connect()
                    _ = try await events.first(within: Self.wait)
                    await sse.terminate()
                    return try recorder.cassette()
                }
                #expect(cassette.sessions.map(\.kind) == [.webSocket, .eventStream])
                #expect(cassette.sessions.first?.steps.count == 7)
                #expect(cassette.sessions.last?.steps.contains { if case .event = $0.action { true } else { false } } == true)

                try await Self.withRecorder(upstream: upstream.webSocketURL("/"), Self.expectUnreachable)
            }
        }
    }

    @Test("a client that does not read holds the upstream back through the recorder (TCP on both sides), then gets every message in order")
    func backpressureThroughTheRecorder() async throws {
        // More than the kernel holds on both hops, and the recorder's own buffer (1 MiB).
        let total = (2 * Backpressure.moreThanTheKernelHolds + 2 * 1024 * 1024) / 1024
        let peer = try await ScriptedPeer.start { _ in .init(echo: false, flood: (total, 1024)) }
        try await withTimeout(.seconds(60)) {
            try await Self.withRecorder(upstream: URL(string: "ws://127.0.0.1:\(peer.port)")!) { server, recorder in
                let socket = WebSocket(url: server.webSocketURL("/"), configuration: .init(streamBufferLimit: 64, streamBufferBytes: 64 * 1024))
                let messages = socket.messages
                try await socket.connect()
                // Nobody reads: the socket stops reading, the recorder's channel fills, and TCP
                // stops the upstream.
                await socket.core.gate.waitUntilClosed()
                await peer.waitUntilHeldBack()
                // Held, not merely slowed down: after the recorder has answered twenty requests
                // of others (its event loops ran all the while), the upstream still could not
                // write it all, and the recorder has not taken it all (without the hold it takes
                // the whole flood as fast as the upstream writes, and buffers it for the client).
                for _ in 0..<20 {
                    let answer = try await HTTPProbe.send(port: server.port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    #expect(answer.hasPrefix("HTTP/1.1 "))
                }
                #expect(peer.floodedCount < total, "the upstream could not write it all: held back through the recorder")
                let taken = try recorder.cassette().sessions.first?.steps.count ?? 0
                #expect(taken < total, "the recorder took \(taken) of \(total) while the client read nothing")
                #expect(await Backpressure.countInOrder(messages, upTo: total) == total)
                let recorded = try recorder.cassette().sessions.first?.steps.count ?? 0
                #expect(recorded >= total, "every message recorded")
                await socket.terminate()
            }
        }
        await peer.stop()
    }

    @Test("a request whose path or query is not valid percent-encoding is answered, not a crash; the recorder serves on")
    func badPercentEncoding() async throws {
        try await withTimeout(Self.wait) {
            try await withDuplexServer { upstream in
                try await Self.withRecorder(upstream: upstream.webSocketURL("/")) { server, _ in
                    let upgrade =
                        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                    for request in [
                        "GET /%ZZ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                        "GET /a%zz?q=%zz%%% HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                        "GET /%G1?%% HTTP/1.1\r\nHost: x\r\n\(upgrade)\r\n",
                    ] {
                        let answer = try await HTTPProbe.send(port: server.port, request)
                        #expect(answer.hasPrefix("HTTP/1.1 "), "answered: \(answer.prefix(80))")
                    }
                    let echoed = try await Self.echoSession(WebSocket(url: server.webSocketURL("/echo")))
                    #expect(echoed == [.string("a"), .string("b"), .data(Data([1, 2, 3]))], "and it serves on")
                }
            }
        }
    }

    @Test("an upstream that cannot be reached: the WebSocket and the SSE client get 502, and nothing is recorded")
    func unreachableUpstream() async throws {
        let port = try RefusingPort()
        try await withTimeout(Self.wait) {
            try await Self.withRecorder(upstream: URL(string: "ws://127.0.0.1:\(port.port)")!, Self.expectUnreachable)
        }
    }
}
