import Duplex
import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

/// 50 `ChatClient`s in 5 rooms through a FaultProxy for DUPLEX_SOAK_SECONDS (default 60), with
/// random proxy and server faults (amnesiac restarts among them), checked for zero loss and
/// zero duplication. Off unless DUPLEX_SOAK is set:
///
///     DUPLEX_SOAK=1 DUPLEX_SOAK_SECONDS=600 DUPLEX_SOAK_FAULT_MS=300-900 swift test --filter SoakTests
///
/// Loss is counted over the messages acknowledged in each room's final epoch: an amnesiac
/// restart loses the history before it by design (and every member is told, `historyReset`).
/// A duplicate is a message any member's `events` reports twice, across epochs included.
@Suite("soak", .enabled(if: ProcessInfo.processInfo.environment["DUPLEX_SOAK"] != nil))
struct SoakTests {
    static let seconds = Int(ProcessInfo.processInfo.environment["DUPLEX_SOAK_SECONDS"] ?? "") ?? 60
    /// The pause between faults, in milliseconds: "MIN-MAX".
    static let faultPause: ClosedRange<Int> = {
        let parts = (ProcessInfo.processInfo.environment["DUPLEX_SOAK_FAULT_MS"] ?? "1500-4000").split(separator: "-").compactMap { Int($0) }
        return parts.count == 2 && parts[0] <= parts[1] ? parts[0]...parts[1] : 1500...4000
    }()

    /// One chat member and what it saw.
    final class Member: Sendable {
        struct Read: Sendable {
            var key: String
            var seq: Int
            var epoch: String?
        }

        let name: String
        let room: String
        let client: ChatClient
        let epoch = NIOLockedValueBox<String?>(nil)
        let read = NIOLockedValueBox<[Read]>([])
        /// `name/clientMessageId` of each acknowledged message, with the epoch it was acked in.
        let acked = NIOLockedValueBox<[(key: String, epoch: String?)]>([])
        let resets = NIOLockedValueBox(0)
        /// The last disconnection, for the report of a member that missed messages.
        let lastDisconnect = NIOLockedValueBox("none")
        /// Ticks once per message read, so a waiter can check again.
        let (updates, update) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))

        init(name: String, room: String, base: String) {
            self.name = name
            self.room = room
            client = ChatClient(
                url: URL(string: "\(base)/chat/\(room)")!,
                name: name,
                configuration: WebSocketConfiguration(
                    ping: PingConfig(pingInterval: .milliseconds(500), maxPingFailures: 2),
                    reconnection: .exponentialBackoff(baseDelay: .milliseconds(50), maxDelay: .milliseconds(500)),
                    maxQueuedSends: 10_000,
                    connectTimeout: .seconds(2)
                )
            )
        }

        func start() async throws -> Task<Void, Never> {
            let events = client.events
            let reading = Task {
                for await event in events {
                    switch event {
                    case .welcome(let welcome, _):
                        self.epoch.withLockedValue { $0 = welcome.epoch }
                    case .message(let message):
                        let epoch = self.epoch.withLockedValue { $0 }
                        self.read.withLockedValue {
                            $0.append(Read(key: "\(message.from)/\(message.clientMessageID)", seq: message.seq, epoch: epoch))
                        }
                        self.update.yield()
                    case .delivered(let ack):
                        let epoch = self.epoch.withLockedValue { $0 }
                        self.acked.withLockedValue { $0.append(("\(self.name)/\(ack.clientMessageID)", epoch)) }
                    case .historyReset:
                        self.resets.withLockedValue { $0 += 1 }
                    case .disconnected(let reason, let reconnecting):
                        self.lastDisconnect.withLockedValue { $0 = "\(reason), reconnecting: \(reconnecting)" }
                    default:
                        break
                    }
                }
            }
            _ = try await client.join(timeout: .seconds(30))
            return reading
        }
    }

    @Test("50 clients, random faults with amnesiac restarts, zero loss and zero duplication")
    func soak() async throws {
        try await withTimeout(.seconds(Self.seconds + 180)) {
            var configuration = DuplexServerConfiguration()
            configuration.historyLimit = 100_000
            configuration.historyBytesLimit = 64 * 1024 * 1024
            configuration.totalHistoryBytesLimit = 512 * 1024 * 1024
            try await withDuplexServer(configuration: configuration) { server in
                let proxy = try await FaultProxy.start(upstreamPort: server.port)
                let base = "ws://127.0.0.1:\(proxy.port)"
                let members = (0..<50).map { Member(name: "m\($0)", room: "r\($0 % 5)", base: base) }
                var readers: [Task<Void, Never>] = []
                for member in members { readers.append(try await member.start()) }
                let end = ContinuousClock.now + .seconds(Self.seconds)
                let faults = NIOLockedValueBox<[String]>([])
                // The sleeps below pace the workload (a fault every so often, a message every
                // 100-300 ms per client); nothing waits on them for an event.
                let chaos = Task {
                    while ContinuousClock.now < end, ProcessInfo.processInfo.environment["DUPLEX_SOAK_NO_FAULTS"] == nil {
                        try? await Task.sleep(for: .milliseconds(Int.random(in: Self.faultPause)))
                        switch Int(ProcessInfo.processInfo.environment["DUPLEX_SOAK_FAULT"] ?? "") ?? Int.random(in: 0..<10) {
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
                        case 4:
                            server.server.stallConnections(.room("r\(Int.random(in: 0..<5))"), for: .seconds(2));
                            faults.withLockedValue { $0.append("stall") }
                        case 5: proxy.add(.resetPeer, direction: .both); proxy.removeAll(); faults.withLockedValue { $0.append("reset") }
                        case 6: server.server.restart(downFor: .milliseconds(200)); faults.withLockedValue { $0.append("restart") }
                        case 8:
                            // Every open connection goes half-open; the clients' pings notice.
                            let id = proxy.add(.pathSwitch, direction: .both)
                            faults.withLockedValue { $0.append("path switch") }
                            try? await Task.sleep(for: .seconds(2))
                            proxy.remove(id)
                        case 9:
                            proxy.add(.suspend(.milliseconds(1500)), direction: .both)
                            faults.withLockedValue { $0.append("suspension") }
                        default:
                            server.server.restart(downFor: .milliseconds(200), amnesia: true);
                            faults.withLockedValue { $0.append("amnesiac restart") }
                        }
                    }
                }
                print("soak: clients joined, running \(Self.seconds) s, a fault every \(Self.faultPause) ms")
                await Self.talk(members, until: end)
                await chaos.value
                proxy.removeAll()
                let report = await Self.verify(members, faults: faults.withLockedValue { $0 })
                print("soak: \(Self.seconds) s, 50 clients, \(report)")
                for member in members { await member.client.leave() }
                for reader in readers { reader.cancel() }
                await proxy.stop()
            }
        }
    }
}

extension SoakTests {
    /// Every member says a message every 100-300 ms until `end`. The sleeps pace the workload;
    /// nothing waits on them for an event.
    static func talk(_ members: [Member], until end: ContinuousClock.Instant) async {
        await withTaskGroup(of: Void.self) { group in
            for member in members {
                group.addTask {
                    var n = 0
                    while ContinuousClock.now < end, !Task.isCancelled {
                        n += 1
                        _ = try? await member.client.say("soak \(n)")
                        try? await Task.sleep(for: .milliseconds(Int.random(in: 100...300)))
                    }
                }
            }
        }
    }

    /// What a soak found.
    struct Report: CustomStringConvertible {
        var acked = 0
        var ackedInFinalEpochs = 0
        var deliveries = 0
        var lost = 0
        var duplicated = 0
        var disordered = 0
        var resets = 0
        var faults: [String] = []

        var description: String {
            let kinds = Dictionary(faults.map { ($0, 1) }, uniquingKeysWith: +).sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }
            return
                "\(acked) messages acked (\(ackedInFinalEpochs) in the final epochs), \(deliveries) deliveries checked, \(lost) lost, \(duplicated) duplicated, \(disordered) out of order, \(resets) history resets reported, \(faults.count) faults: \(kinds.joined(separator: ", "))"
        }
    }

    /// Waits until every member's messages are acknowledged and every member has read what its
    /// room acknowledged in its final epoch (at most 60 s and 30 s), then counts and expects:
    /// nothing lost, nothing duplicated, nothing out of order within an epoch, nothing read that
    /// no sender had acknowledged.
    static func verify(_ members: [Member], faults: [String]) async -> Report {
        for member in members { _ = await member.client.waitForDelivery(timeout: .seconds(60)) }
        // The room's final epoch is the one its members are in now.
        var finalEpoch: [String: String] = [:]
        for member in members { if let epoch = member.epoch.withLockedValue({ $0 }) { finalEpoch[member.room] = epoch } }
        var allAcked: [String: Set<String>] = [:]
        var expected: [String: Set<String>] = [:]
        for member in members {
            for ack in member.acked.withLockedValue({ $0 }) {
                allAcked[member.room, default: []].insert(ack.key)
                if ack.epoch == finalEpoch[member.room] { expected[member.room, default: []].insert(ack.key) }
            }
        }
        // At most 30 s: whatever is still missing then is reported by the checks below.
        for member in members {
            let want = expected[member.room] ?? []
            let done: @Sendable () -> Bool = { Set(member.read.withLockedValue { $0.map(\.key) }).isSuperset(of: want) }
            if !done() { _ = try? await member.updates.first(within: .seconds(30)) { _ in done() } }
        }
        var report = Report(faults: faults)
        for member in members {
            let read = member.read.withLockedValue { $0 }
            report.deliveries += read.count
            report.duplicated += read.count - Set(read.map(\.key)).count
            var firstSeen: [String: Member.Read] = [:]
            var shown = 0
            for entry in read {
                if let first = firstSeen[entry.key] {
                    if shown < 3 {
                        print("DUP \(member.name): \(entry.key) first \(first.epoch ?? "-"):\(first.seq) again \(entry.epoch ?? "-"):\(entry.seq)")
                    }
                    shown += 1
                } else {
                    firstSeen[entry.key] = entry
                }
            }
            for (index, entry) in read.enumerated().dropFirst() where entry.epoch == read[index - 1].epoch && entry.seq <= read[index - 1].seq {
                report.disordered += 1
            }
            let missing = (expected[member.room] ?? []).subtracting(read.map(\.key))
            report.lost += missing.count
            #expect(
                missing.isEmpty,
                "\(member.name) missed \(missing.count): \(missing.sorted().prefix(5)); last disconnection: \(member.lastDisconnect.withLockedValue { $0 }); pending \(member.client.pendingCount)"
            )
            let phantom = Set(read.map(\.key)).subtracting(allAcked[member.room] ?? [])
            #expect(phantom.isEmpty, "\(member.name) read \(phantom.count) messages whose senders have no ack: \(phantom.sorted().prefix(5))")
        }
        #expect(report.duplicated == 0, "messages reported twice")
        #expect(report.disordered == 0, "messages out of order within an epoch")
        report.acked = allAcked.values.map(\.count).reduce(0, +)
        report.ackedInFinalEpochs = expected.values.map(\.count).reduce(0, +)
        report.resets = members.map { $0.resets.withLockedValue { $0 } }.reduce(0, +)
        return report
    }
}
