import NIOConcurrencyHelpers
import Testing

@testable import DuplexPostgres
@testable import DuplexChat
@testable import DuplexServer

@Suite("PostgreSQL group commit: the batcher and a batch's repeats")
struct PostgresSayBatcherTests {
    static func item(_ room: String, token: String, name: String, id: String, byName: Bool = false) -> PostgresSayBatcher.Item {
        .init(room: room, prefix: "{", suffix: "}", tokenKey: "t\n\(token)\n\(id)", nameKey: "n\n\(name)\n\(id)", matchByName: byName)
    }

    @Test("a message repeated in one batch is sent once; the repeat is answered as its duplicate, by token, or by name only when it matches by name")
    func repeatsInOneBatch() {
        let batch = [
            Self.item("a", token: "T1", name: "alice", id: "1"),
            Self.item("a", token: "T1", name: "alice", id: "1"),  // the same, resent
            Self.item("b", token: "T1", name: "alice", id: "1"),  // another room: not the same
            Self.item("a", token: "T2", name: "alice", id: "1", byName: true),  // by name: the same
            Self.item("a", token: "T3", name: "alice", id: "1"),  // another token, not by name
        ]
        let (distinct, sameAs) = PostgresChatStore.resolvingDuplicates(batch)
        #expect(distinct.count == 3)
        #expect(sameAs == [1: 0, 3: 0])
    }

    @Test("messages queued while a commit is in flight go together in the next, in order; a failed commit fails the messages queued behind it too")
    func batchesAndFailure() async throws {
        let batcher = PostgresSayBatcher(limits: .init(maxCount: 100, maxBytes: 1 << 20))
        let (gate, open) = AsyncStream.makeStream(of: Void.self)
        let (commits, commit) = AsyncStream.makeStream(of: [String].self)
        let failNext = NIOLockedValueBox(false)
        let running = Task {
            await batcher.run { items in
                commit.yield(items.map(\.tokenKey))
                var iterator = gate.makeAsyncIterator()
                _ = await iterator.next()
                if failNext.withLockedValue({ $0 }) { throw ChatStoreUnavailable(description: "injected") }
                return items.indices.map { .recorded(seq: $0 + 1, duplicate: false) }
            }
        }
        let (answers, answer) = AsyncStream.makeStream(of: (String, Bool).self)
        func say(_ id: String) {
            batcher.enqueue(Self.item("r", token: "T", name: "n", id: id)) { result in
                answer.yield((id, (try? result.get()) != nil))
            }
        }
        var seen = commits.makeAsyncIterator()
        say("1")
        #expect(await seen.next() == ["t\nT\n1"], "the first goes alone")
        say("2")
        say("3")
        say("4")
        open.yield()  // the first commit ends; the three queued meanwhile go in one
        #expect(await seen.next() == ["t\nT\n2", "t\nT\n3", "t\nT\n4"])
        failNext.withLockedValue { $0 = true }
        say("5")  // queued behind the failing commit
        open.yield()
        var results: [String: Bool] = [:]
        for await (id, ok) in answers {
            results[id] = ok
            if results.count == 5 { break }
        }
        #expect(results == ["1": true, "2": false, "3": false, "4": false, "5": false])
        #expect(batcher.counts.batches == 1 && batcher.counts.messages == 1)
        running.cancel()
    }
}
