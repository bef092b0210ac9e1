import DuplexSchema
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import Testing
import TestSupport

@testable import Duplex

/// The client's data path: pipelined sends with a bounded outbound buffer, lossless receive
/// with TCP backpressure, honest reports of what was not written.
@Suite("the client data path: backpressure both ways, nothing lost", .serialized)
struct DataPathTests {
    static func url(_ peer: ScriptedPeer) -> URL { URL(string: "ws://127.0.0.1:\(peer.port)/")! }

    static func padded(_ n: Int, bytes: Int = 1024) -> String {
        let head = "\(n):"
        return head + String(repeating: "x", count: bytes - head.utf8.count)
    }

    @Test("a reader that stops reading holds the server back through TCP (its channel becomes unwritable), then gets every message in order")
    func slowReaderLosesNothing() async throws {
        let total = Backpressure.moreThanTheKernelHolds / 1024  // more than the socket buffers hold while nobody reads
        let peer = try await ScriptedPeer.start { _ in .init(echo: false, flood: (total, 1024)) }
        var configuration = WebSocketConfiguration()
        configuration.streamBufferLimit = 64
        configuration.streamBufferBytes = 64 * 1024
        let socket = WebSocket(url: Self.url(peer), configuration: configuration)
        let messages = socket.messages
        try await withTimeout(.seconds(60)) {
            try await socket.connect()
            // Nobody reads: the socket must stop reading, and TCP must stop the server.
            await socket.core.gate.waitUntilClosed()
            await peer.waitUntilHeldBack()
            let buffered = socket.core.messages.bufferedCount
            #expect(buffered >= 64, "the reader's buffer filled")
            #expect(buffered < 2_000, "and stayed bounded (\(buffered) unread of \(total))")
            #expect(peer.floodedCount < total, "the server could not write it all: TCP held it back")
            #expect(await Backpressure.countInOrder(messages, upTo: total) == total)
            #expect(socket.core.messages.droppedCount == 0)
        }
        await socket.terminate()
        await peer.stop()
    }

    @Test("ReconnectingWebSocket: a reader that stops reading holds the server back too, then gets every message in order")
    func reconnectingSlowReader() async throws {
        let total = Backpressure.moreThanTheKernelHolds / 1024
        let peer = try await ScriptedPeer.start { _ in .init(echo: false, flood: (total, 1024)) }
        let inner = WebSocketConfiguration(streamBufferLimit: 64)
        let url = Self.url(peer)
        let socket = ReconnectingWebSocket(connect: { WebSocket(url: url, configuration: inner) }, strategy: .none, streamBufferLimit: 64)
        let messages = socket.messages
        try await withTimeout(.seconds(60)) {
            try await socket.connect()
            // Nobody reads: forwarding waits (the wrapper's gate closes), the inner socket's
            // stream fills, and TCP stops the server.
            await socket.gate.waitUntilClosed()
            await peer.waitUntilHeldBack()
            #expect(socket.unreadMessages <= 65, "the wrapper's buffer stayed at its limit (\(socket.unreadMessages))")
            #expect(peer.floodedCount < total, "the server could not write it all: TCP held it back")
            #expect(await Backpressure.countInOrder(messages, upTo: total) == total, "every message, in order")
        }
        await socket.terminate()
        await peer.stop()
    }

    @Test("while the socket holds back its reads for a slow reader, unanswered pings do not count as a dead connection")
    func pingsExcusedWhileReadsAreHeld() async throws {
        let total = Backpressure.moreThanTheKernelHolds / 1024
        let peer = try await ScriptedPeer.start { _ in .init(echo: false, flood: (total, 1024)) }
        var configuration = WebSocketConfiguration()
        configuration.streamBufferLimit = 64
        configuration.ping = PingConfig(pingInterval: .milliseconds(100), maxPingFailures: 2, pongTimeout: .milliseconds(50))
        let socket = WebSocket(url: Self.url(peer), configuration: configuration)
        let messages = socket.messages
        try await withTimeout(.seconds(30)) {
            try await socket.connect()
            await socket.core.gate.waitUntilClosed()
            // Five pings while nothing is read: their pongs wait behind the flood, unread.
            await peer.waitForPings(5, onConnection: 1)
            #expect(!socket.core.gate.isOpen, "still held back")
            #expect(socket.state == .connected(protocol: nil), "not torn down by unanswered pings")
            #expect(await Backpressure.countInOrder(messages, upTo: total) == total)
            #expect(peer.connectionCount == 1)
        }
        await socket.terminate()
        await peer.stop()
    }

    @Test("with newest(n), a reader sees the latest messages and never holds the server back")
    func newestNeverHoldsBack() async throws {
        let total = 5_000
        let peer = try await ScriptedPeer.start { _ in .init(echo: false, flood: (total, 256)) }
        var configuration = WebSocketConfiguration()
        configuration.streamBufferLimit = 16
        let socket = WebSocket(url: Self.url(peer), configuration: configuration)
        let latest = socket.messages(buffering: .newest(10))
        let complete = socket.messages  // a lossless reader that keeps up
        try await withTimeout(.seconds(30)) {
            try await socket.connect()
            var count = 0
            for await _ in complete {
                count += 1
                if count == total { break }
            }
            var seen: [String] = []
            var iterator = latest.makeAsyncIterator()
            for _ in 0..<10 { if let message = await iterator.next() { seen.append(String(message.text?.prefix { $0 != ":" } ?? "")) } }
            #expect(seen == (total - 10..<total).map(String.init), "the last ten, the older ones dropped")
        }
        await socket.terminate()
        await peer.stop()
    }

    @Test("send suspends above the high watermark while the server reads nothing, resumes once it reads, and every message arrives in order")
    func sendSuspendsAboveWatermark() async throws {
        // Messages of 1 KiB: until the server reads, the kernel takes only part of them, so a send
        // must wait for the server, not only for the client's own writes.
        let total = Backpressure.moreThanTheKernelHolds / 1024
        let peer = try await ScriptedPeer.start { _ in .init(echo: false, holdReads: true) }
        var configuration = WebSocketConfiguration()
        configuration.sendBufferHighWatermark = 64 * 1024
        configuration.sendBufferLowWatermark = 16 * 1024
        let socket = WebSocket(url: Self.url(peer), configuration: configuration)
        // What the test waits on, and how many messages were sent: a run that stalls says where.
        let progress = NIOLockedValueBox((step: "connecting", sent: 0))
        do {
            try await withTimeout(.seconds(60)) {
                try await socket.connect()
                let sender = Task {
                    for n in 0..<total {
                        try await socket.send(Self.padded(n))
                        progress.withLockedValue { $0.sent = n + 1 }
                    }
                }
                progress.withLockedValue { $0.step = "waiting for send to suspend" }
                await socket.core.waitUntilSendSuspended()
                #expect(peer.receivedTexts.isEmpty, "the server has read nothing yet")
                peer.releaseReads()
                progress.withLockedValue { $0.step = "the sender, after the server began reading" }
                try await sender.value
                progress.withLockedValue { $0.step = "flush" }
                try await socket.flush()
                progress.withLockedValue { $0.step = "the server reading every message" }
                await peer.waitForTexts(total)
                let received = peer.receivedTexts
                #expect(received.count == total)
                #expect(received.enumerated().allSatisfy { $0.element.hasPrefix("\($0.offset):") }, "in order")
            }
        } catch {
            let (step, sent) = progress.withLockedValue { $0 }
            Issue.record(
                "\(error) while waiting on \(step): \(sent) sent, \(socket.queuedSendCount) queued, \(peer.receivedTexts.count) read by the server, the socket \(socket.state)"
            )
        }
        await socket.terminate()
        await peer.stop()
    }

    @Test("a message accepted but not written when the connection dies is reported in events, and the next send throws")
    func unwrittenAreReported() async throws {
        let peer = try await ScriptedPeer.start { _ in .init(echo: false, holdReads: true) }
        var configuration = WebSocketConfiguration()
        configuration.sendBufferHighWatermark = 64 * 1024
        let socket = WebSocket(url: Self.url(peer), configuration: configuration)
        let events = socket.events
        try await withTimeout(.seconds(30)) {
            try await socket.connect()
            // This cannot fit in the socket buffers of a server that reads nothing: the write
            // cannot finish, so the send returns with the message unwritten.
            let big = Data(count: Backpressure.moreThanTheKernelHolds)
            let sender = Task { try await socket.send(.data(big)) }
            await socket.core.waitUntilSendSuspended()
            peer.dropAll()
            try await sender.value  // accepted: send returned before the write
            let reported = try await events.first(within: .seconds(10)) { event in
                if case .error(let error) = event { return error.message.contains("not written") }
                return false
            }
            if case .error(let error) = reported {
                #expect(error.code == .connectionLost)
                #expect(error.message == "1 sent message was not written before the connection ended")
            }
            // The next send throws that error, once.
            do {
                try await socket.send("after the big one")
                Issue.record("the next send should have thrown")
            } catch let error as WebSocketError {
                #expect(error.code == .connectionLost)
                #expect(error.message.contains("not written"))
            }
            await #expect(throws: WebSocketError.self, "then, not connected") { try await socket.send("later") }
        }
        await socket.terminate()
        await peer.stop()
    }

    @Test("pipelined sends keep their order across a reconnection: sends made while reconnecting all arrive, after the earlier ones, none twice")
    func orderAcrossReconnection() async throws {
        let peer = try await ScriptedPeer.start { number in .init(echo: false, dropAfterTexts: number == 1 ? 500 : nil) }
        var configuration = WebSocketConfiguration()
        configuration.reconnection = .fixedDelay(.milliseconds(50))
        configuration.maxQueuedSends = 10_000
        let socket = WebSocket(url: Self.url(peer), configuration: configuration)
        let states = socket.stateEvents
        try await withTimeout(.seconds(30)) {
            try await socket.connect()
            for n in 0..<1000 { try await socket.send(Self.padded(n, bytes: 64)) }
            _ = try await states.first(within: .seconds(10)) { state in
                if case .disconnected = state { return true }
                return false
            }
            // Sent while reconnecting, and then on the new connection.
            var n = 1000
            while n < 2000 {
                do {
                    try await socket.send(Self.padded(n, bytes: 64))
                    n += 1
                } catch let error as WebSocketError where error.code == .connectionLost {
                    continue  // earlier messages were not written; this send was not made
                }
            }
            // One snapshot per turn: reading the texts twice (once to check, once to count) let
            // the last message arrive in between, and the wait was then for one that never came.
            while true {
                let seen = peer.receivedTexts
                if seen.contains(where: { $0.hasPrefix("1999:") }) { break }
                await peer.waitForTexts(seen.count + 1)
            }
            let numbers = peer.receivedTexts.compactMap { Int($0.prefix { $0 != ":" }) }
            #expect(zip(numbers, numbers.dropFirst()).allSatisfy { $0 < $1 }, "strictly increasing: no duplicate, no reordering")
            #expect(numbers.filter { $0 >= 1000 } == Array(1000..<2000), "every send made while reconnecting arrived, in order")
            #expect(numbers.prefix(500) == Array(0..<500)[...], "the first connection's messages came first")
            #expect(peer.connectionCount == 2)
        }
        await socket.terminate()
        await peer.stop()
    }

    @Test("SSE: a reader that falls far behind a small limit still gets every event, in order (nothing dropped)")
    func sseSlowReader() async throws {
        let total = 2_000
        let padding = String(repeating: "x", count: 1000)
        let peer = try await ScriptedHTTPPeer.start { _ in
            .init(chunks: (0..<total).map { "id: \($0)\ndata: \($0) \(padding)\n\n" }, stall: true)
        }
        let sse = ServerSentEventManager(
            url: URL(string: "http://127.0.0.1:\(peer.port)/")!,
            configuration: .init(streamBufferLimit: 16)
        )
        let events = sse.events
        try await withTimeout(.seconds(30)) {
            try await sse.connect()
            // Nobody reads until the reader is behind by the limit.
            await sse.core.gate.waitUntilClosed()
            #expect(sse.core.events.bufferedCount >= 16)
            var expected = 0
            for await event in events {
                #expect(event.id == "\(expected)")
                expected += 1
                if expected == total { break }
            }
            #expect(expected == total)
        }
        await sse.terminate()
        await peer.stop()
    }
}
