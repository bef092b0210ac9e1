import DuplexSchema
import DuplexServer
import DuplexTesting
import Foundation
import Testing

/// Members on different event loops saying at once, over loopback: the room's deliveries stay in
/// order, and each ack follows its own message.
@Suite("chat: members saying at once")
struct ChatConcurrencyTests {
    @Test("8 members each pipeline 40 says: everyone gets all 320 messages once, in seq order, and every ack after its message")
    func concurrentSays() async throws {
        let members = 8
        let says = 40
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                // Everyone joins first, so that every member is present for every message.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    let joined = AsyncCounter()
                    for index in 0..<members {
                        group.addTask {
                            try await TestWebSocket.with(port: server.port, path: "/chat/together?name=m\(index)") { socket in
                                _ = try await socket.receiveWelcome()
                                await joined.increment()
                                await joined.wait(for: members)
                                for n in 0..<says { try await socket.say("m\(index) \(n)", id: "\(n)") }
                                var seqs: [Int] = []
                                var messageSeqs = Set<Int>()
                                var acks = 0
                                while seqs.count < members * says || acks < says {
                                    switch try await socket.receiveChat() {
                                    case .message(let message):
                                        seqs.append(message.seq)
                                        messageSeqs.insert(message.seq)
                                    case .ack(let ack):
                                        #expect(messageSeqs.contains(ack.seq), "m\(index): the ack of \(ack.seq) came before the message")
                                        acks += 1
                                    default:
                                        continue
                                    }
                                }
                                #expect(seqs == seqs.sorted(), "m\(index) got messages in seq order")
                                #expect(Set(seqs).count == members * says, "m\(index) got every message once")
                            }
                        }
                    }
                    try await group.waitForAll()
                }
            }
        }
    }
}

/// Counts arrivals; `wait(for:)` returns once the count reaches a number.
actor AsyncCounter {
    private var count = 0
    private var waiters: [(Int, CheckedContinuation<Void, Never>)] = []

    func increment() {
        count += 1
        let ready = waiters.filter { $0.0 <= count }
        waiters.removeAll { $0.0 <= count }
        for (_, waiter) in ready { waiter.resume() }
    }

    func wait(for target: Int) async {
        if count >= target { return }
        await withCheckedContinuation { waiters.append((target, $0)) }
    }
}
