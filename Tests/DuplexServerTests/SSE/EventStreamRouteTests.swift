import DuplexSchema
import DuplexTesting
import Foundation
import NIOCore
import NIOHTTP1
import Testing

@testable import DuplexHost
@testable import DuplexServer

@Suite("GET /events and GET /chat/{room}/events over loopback")
struct EventStreamRouteTests {
    struct Tick: Decodable {
        var n: Int64
        var at: String
    }

    @Test("/events opens with retry: 2000, then tick events with increasing integer ids matching data.n")
    func tickStream() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestHTTPResponse.get(port: server.port, "/events?interval=20") { response in
                    #expect(response.status == 200)
                    #expect(response.headers["Content-Type"].first?.hasPrefix("text/event-stream") == true)
                    #expect(response.headers["Cache-Control"] == ["no-cache"])
                    var ids: [Int64] = []
                    for _ in 0..<5 {
                        let event = try #require(try await response.nextEvent())
                        #expect(event.event == "tick")
                        let tick = try JSONDecoder().decode(Tick.self, from: Data(event.data.utf8))
                        #expect(String(tick.n) == event.id)
                        #expect(ChatTimestamp.parse(tick.at) != nil)
                        ids.append(tick.n)
                    }
                    #expect(response.bodyText.hasPrefix("retry: 2000\n\n"))
                    #expect(response.retry == 2000)
                    #expect(ids == Array(ids[0]..<(ids[0] + 5)))
                }
            }
        }
    }

    @Test("Last-Event-ID: N resumes at N+1 exactly, replaying ticks already due")
    func tickResume() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                let seen: [String] = try await TestHTTPResponse.get(port: server.port, "/events?interval=10") { response in
                    var ids: [String] = []
                    for _ in 0..<3 { ids.append(try #require(try await response.nextEvent()?.id)) }
                    return ids
                }
                let last = try #require(seen.last)
                try await TestHTTPResponse.get(port: server.port, "/events?interval=10", headers: [("Last-Event-ID", last)]) { response in
                    var resumed: [Int64] = []
                    for _ in 0..<4 {
                        let id = try #require(try await response.nextEvent()?.id)
                        resumed.append(try #require(Int64(id)))
                    }
                    let first = try #require(Int64(last)) + 1
                    #expect(resumed == Array(first..<(first + 4)))
                }
            }
        }
    }

    @Test("a tick backlog past the outbound queue's bounds goes out whole over loopback, in batches: every id once, in order")
    func backlogPastTheBounds() async throws {
        try await withTimeout(.seconds(60)) {
            // A queue of 16 events and a backlog of 2,000 (EventStreamWriterTests checks the
            // waiting itself, on a channel that is not writable; a backlog large enough to fill
            // loopback's buffers here would be a load test that slows every other test).
            let backlog: Int64 = 2_000
            try await withDuplexServer(configuration: .init(historyLimit: Int(backlog), outboundQueueLimit: 16)) { server in
                let nowTick = Int64(Date().timeIntervalSince1970 * 1000) / 10
                let last = nowTick - backlog
                // Read raw, the ids only: a parser in a debug build would make this test the
                // machine's load.
                let ids = try await withRawConnection(port: server.port) { inbound, outbound in
                    try await outbound.write(
                        ByteBuffer(string: "GET /events?interval=10 HTTP/1.1\r\nHost: x\r\nLast-Event-ID: \(last)\r\n\r\n"))
                    var ids: [Int64] = []
                    var partial = ""
                    for try await chunk in inbound {
                        // `isNewline`: the chunked encoding's CR LF is one Character.
                        let lines = (partial + String(buffer: chunk)).split(omittingEmptySubsequences: false, whereSeparator: \.isNewline)
                        partial = String(lines.last ?? "")
                        ids += lines.dropLast().compactMap { $0.hasPrefix("id: ") ? Int64($0.dropFirst(4)) : nil }
                        if let newest = ids.last, newest >= nowTick { break }
                    }
                    return ids
                }
                let first = try #require(ids.first)
                // The window is the history limit back from the server's now, a tick or two on.
                #expect(first > last && first <= last + 1_000, "the replay starts after Last-Event-ID: \(first) against \(last)")
                #expect(ids.last ?? 0 >= nowTick, "the stream ended at \(ids.last ?? 0), before \(nowTick)")
                #expect(zip(ids, ids.dropFirst()).allSatisfy { $1 == $0 + 1 }, "every id once, in order")
            }
        }
    }

    @Test("a non-integer Last-Event-ID gets the live stream")
    func nonIntegerLastEventID() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestHTTPResponse.get(port: server.port, "/events?interval=100", headers: [("Last-Event-ID", "not-a-number")]) { response in
                    let event = try #require(try await response.nextEvent())
                    let id = try #require(event.id.flatMap { Int64($0) })
                    let nowTick = Int64(Date().timeIntervalSince1970 * 1000) / 100
                    #expect(
                        abs(id - nowTick) <= 100,
                        "the first tick is the live one (a replay would start 1000 ticks back); 100 ticks of slack for a loaded machine")
                }
            }
        }
    }

    @Test("an interval below the minimum or not a number gets 400")
    func badInterval() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                for interval in ["5", "abc", "-1", "999999999999"] {
                    try await TestHTTPResponse.get(port: server.port, "/events?interval=\(interval)") { response in
                        let body = try await response.readBody()
                        #expect(response.status == 400, "interval=\(interval)")
                        #expect(body.contains("invalid_interval"))
                    }
                }
            }
        }
    }

    @Test("an idle stream sends comment heartbeats")
    func heartbeat() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(heartbeatInterval: .milliseconds(50))) { server in
                try await TestHTTPResponse.get(port: server.port, "/chat/quiet/events") { response in
                    while !response.bodyText.contains("\n:") {
                        try await response.readChunk()
                    }
                    #expect(response.bodyText.hasPrefix("retry: 2000\n\n: heartbeat\n"))
                }
            }
        }
    }

    @Test("/chat/{room}/events streams room events with id = EPOCH:SEQ and resumes from Last-Event-ID (a bare seq too)")
    func roomEventStream() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestWebSocket.with(port: server.port, path: "/chat/sse?name=alice") { alice in
                    _ = try await alice.receiveWelcome()
                    for i in 1...3 {
                        try await alice.say("m\(i)", id: "\(i)")
                        _ = try await alice.receiveAck(for: "\(i)")
                    }
                    // seq 1 joined, 2...4 messages
                    try await TestHTTPResponse.get(port: server.port, "/chat/sse/events", headers: [("Last-Event-ID", "2")]) { response in
                        var events: [ServerSentEvent] = []
                        for _ in 0..<2 { events.append(try #require(try await response.nextEvent())) }
                        let epoch = try #require(events.first?.id?.split(separator: ":").first.map(String.init))
                        #expect(events.map(\.id) == ["\(epoch):3", "\(epoch):4"])
                        #expect(events.map(\.event) == ["message", "message"])
                        let frame = try ChatServerFrame.decode(Data(events[0].data.utf8))
                        #expect(frame.message?.text == "m2" && frame.seq == 3)
                        // then live
                        try await alice.say("live", id: "live")
                        let live = try #require(try await response.nextEvent())
                        #expect(live.id == "\(epoch):5")
                        #expect(try ChatServerFrame.decode(Data(live.data.utf8)).message?.text == "live")
                    }
                }
                // presence shows as joined/left events for a watcher that starts from the beginning
                try await TestHTTPResponse.get(port: server.port, "/chat/sse/events", headers: [("Last-Event-ID", "0")]) { response in
                    var types: [String] = []
                    while types.count < 6 { types.append(try #require(try await response.nextEvent()?.event)) }
                    #expect(types == ["joined", "message", "message", "message", "message", "left"])
                }
            }
        }
    }

    @Test("a stream the client leaves ends on the server: its registration goes, for ticks and for a room")
    func streamsEndWithTheClient() async throws {
        try await withTimeout {
            try await withDuplexServer(configuration: .init(heartbeatInterval: .milliseconds(20))) { server in
                for path in ["/events?interval=20", "/chat/leaving/events"] {
                    try await TestHTTPResponse.get(port: server.port, path) { response in
                        while !response.bodyText.contains("\n\n:") && !response.bodyText.contains("id:") {
                            try await response.readChunk()
                        }
                        #expect(server.server.connectionCount == 1, "\(path) is registered while it streams")
                    }
                    // The client has closed: the server's next write (a heartbeat within 20 ms)
                    // fails, and the stream ends; the registry says when its last one is gone.
                    try await withTimeout(.seconds(10)) { await server.server.connections.waitUntilEmpty() }
                    #expect(server.server.connectionCount == 0, "\(path) ended on the server once its client left")
                }
            }
        }
    }

    @Test("a bad room on /chat/{room}/events gets 400")
    func badRoomEventStream() async throws {
        try await withTimeout {
            try await withDuplexServer { server in
                try await TestHTTPResponse.get(port: server.port, "/chat/no%20spaces/events") { response in
                    let body = try await response.readBody()
                    #expect(response.status == 400)
                    #expect(body.contains("invalid_room"))
                }
            }
        }
    }
}
