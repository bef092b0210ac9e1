import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

/// 50 chat clients in 5 rooms through a FaultProxy for DUPLEX_SOAK_SECONDS (default 60), with
/// random proxy and server faults, checked for zero loss and zero duplication. Off unless
/// DUPLEX_SOAK is set:  DUPLEX_SOAK=1 swift test --filter SoakTests
@Suite("soak", .enabled(if: ProcessInfo.processInfo.environment["DUPLEX_SOAK"] != nil))
struct SoakTests {
    static let seconds = Int(ProcessInfo.processInfo.environment["DUPLEX_SOAK_SECONDS"] ?? "") ?? 60

    /// One chat client: resumes with since=, resends until acked, records what it reads.
    final class Member: Sendable {
        let name: String
        let room: String
        let socket: WebSocket
        let book = IntegrationTests.AckBook()
        let lastSeq = NIOLockedValueBox(0)
        /// (from, clientMessageId) of every message read, in order, with its seq.
        let read = NIOLockedValueBox<[(seq: Int, key: String)]>([])
        let acked = NIOLockedValueBox<[String]>([])
        /// Ticks once per message read, so a waiter can check again.
        let (updates, update) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))

        init(name: String, room: String, base: String) {
            self.name = name
            self.room = room
            let url = "\(base)/chat/\(room)?name=\(name)"
            socket = WebSocket(
                url: URL(string: url)!,
                configuration: .init(
                    ping: PingConfig(pingInterval: .milliseconds(500), maxPingFailures: 2),
                    reconnection: .exponentialBackoff(baseDelay: .milliseconds(50), maxDelay: .milliseconds(500)),
                    maxQueuedSends: 10_000
                )
            )
            let lastSeq = self.lastSeq
            socket.prepareRequest = { request in
                var request = request
                request.url = URL(string: url + "&since=\(lastSeq.withLockedValue { $0 })")!
                return request
            }
        }

        func start() async throws -> Task<Void, Never> {
            let frames = WebSocketCodableChannel<ChatClientFrame, ChatServerFrame>(socket: socket, decoder: { ChatProtocol.makeDecoder() }).receiveResults()
            let reading = Task {
                for await result in frames {
                    guard case .success(let frame) = result else { continue }
                    switch frame {
                    case .message(let message):
                        self.lastSeq.withLockedValue { $0 = max($0, message.seq) }
                        self.read.withLockedValue { $0.append((message.seq, "\(message.from)/\(message.clientMessageID)")) }
                        self.update.yield()
                    case .joined(let presence), .left(let presence):
                        self.lastSeq.withLockedValue { $0 = max($0, presence.seq) }
                    case .ack(let ack):
                        await self.book.record(ack.clientMessageID)
                    default:
                        break
                    }
                }
            }
            try await socket.connect()
            return reading
        }

        /// Sends `id` until it is acked.
        func say(_ id: String) async {
            let frame = (try? ChatClientFrame.say(ChatSay(clientMessageID: id, text: "soak \(id)")).jsonString()) ?? ""
            repeat {
                guard !Task.isCancelled else { return }
                try? await socket.send(frame)
            } while await !book.wait(for: id, limit: .seconds(2))
            acked.withLockedValue { $0.append("\(name)/\(id)") }
        }
    }

    @Test("50 clients, random faults, zero loss and zero duplication")
    func soak() async throws {
        try await withTimeout(.seconds(Self.seconds + 120)) {
            var configuration = DuplexServerConfiguration()
            configuration.historyLimit = 100_000
            try await withDuplexServer(configuration: configuration) { server in
                let proxy = try await FaultProxy.start(upstreamPort: server.port)
                let base = "ws://127.0.0.1:\(proxy.port)"
                let members = (0..<50).map { Member(name: "m\($0)", room: "r\($0 % 5)", base: base) }
                var readers: [Task<Void, Never>] = []
                for member in members { readers.append(try await member.start()) }
                let end = ContinuousClock.now + .seconds(Self.seconds)
                let faults = NIOLockedValueBox<[String]>([])
                // The sleeps below pace the workload (a fault every few seconds, a message every
                // 100-300 ms per client); nothing waits on them for an event.
                let chaos = Task {
                    while ContinuousClock.now < end, ProcessInfo.processInfo.environment["DUPLEX_SOAK_NO_FAULTS"] == nil {
                        try? await Task.sleep(for: .milliseconds(Int.random(in: 1500...4000)))
                        switch Int(ProcessInfo.processInfo.environment["DUPLEX_SOAK_FAULT"] ?? "") ?? Int.random(in: 0..<6) {
                        case 0: proxy.dropAll(); faults.withLockedValue { $0.append("proxy drop") }
                        case 1:
                            let id = proxy.add(.latency(.milliseconds(300), jitter: .milliseconds(100)), direction: .both)
                            faults.withLockedValue { $0.append("latency") }
                            try? await Task.sleep(for: .seconds(1))
                            proxy.remove(id)
                        case 2:
                            let id = proxy.add(.blackhole, direction: .both)
                            faults.withLockedValue { $0.append("blackhole") }
                            try? await Task.sleep(for: .seconds(2))
                            proxy.remove(id)
                        case 3: server.server.dropConnections(.room("r\(Int.random(in: 0..<5))")); faults.withLockedValue { $0.append("server drop") }
                        case 4: server.server.stallConnections(.room("r\(Int.random(in: 0..<5))"), for: .seconds(2)); faults.withLockedValue { $0.append("stall") }
                        default: proxy.add(.resetPeer, direction: .both); proxy.removeAll(); faults.withLockedValue { $0.append("reset") }
                        }
                    }
                }
                // every member says something every 200 ms or so, until the end
                print("soak: clients connected, running \(Self.seconds) s")
                await withTaskGroup(of: Void.self) { group in
                    for member in members {
                        group.addTask {
                            var n = 0
                            while ContinuousClock.now < end, !Task.isCancelled {
                                n += 1
                                await member.say("\(n)")
                                try? await Task.sleep(for: .milliseconds(Int.random(in: 100...300)))
                            }
                        }
                    }
                }
                await chaos.value
                proxy.removeAll()
                print("soak: load done; states: \(Dictionary(members.map { ("\($0.socket.state)", 1) }, uniquingKeysWith: +))")
                // wait until every member has read every acked message of its room
                var expected: [String: Set<String>] = [:]
                for member in members { expected[member.room, default: []].formUnion(member.acked.withLockedValue { $0 }) }
                // at most 20 s: whatever is still missing then is reported by the checks below
                for member in members {
                    let want = expected[member.room]!
                    let done: @Sendable () -> Bool = { Set(member.read.withLockedValue { $0.map(\.key) }).isSuperset(of: want) }
                    if !done() {
                        _ = try? await member.updates.first(within: .seconds(20)) { _ in done() }
                    }
                }
                var total = 0
                for member in members {
                    let read = member.read.withLockedValue { $0 }
                    total += read.count
                    #expect(Set(read.map(\.key)).count == read.count, "\(member.name) read a message twice")
                    #expect(read.map(\.seq) == read.map(\.seq).sorted(), "\(member.name) read out of order")
                    let missing = expected[member.room]!.subtracting(read.map(\.key))
                    #expect(missing.isEmpty, "\(member.name) (\(member.socket.state)) missed \(missing.count): \(missing.sorted().prefix(5))")
                    #expect(Set(read.map(\.key)).isSubset(of: expected[member.room]!), "\(member.name) read messages nobody sent")
                }
                let sent = expected.values.map(\.count).reduce(0, +)
                let kinds = Dictionary(faults.withLockedValue { $0 }.map { ($0, 1) }, uniquingKeysWith: +)
                print("soak: \(Self.seconds) s, 50 clients, \(sent) messages acked, \(total) deliveries checked, faults: \(kinds.sorted { $0.key < $1.key })")
                for member in members { await member.socket.terminate() }
                for reader in readers { reader.cancel() }
                await proxy.stop()
            }
        }
    }
}
