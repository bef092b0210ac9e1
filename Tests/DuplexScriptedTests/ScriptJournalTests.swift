import DuplexTesting
import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import DuplexScripted

/// The journal's waits run the test's predicate outside the journal's lock.
@Suite("Script journal")
struct ScriptJournalTests {
    static func entry(_ connection: Int, _ kind: ScriptJournal.Entry.Kind = .text, _ data: String? = nil) -> ScriptJournal.Entry {
        ScriptJournal.Entry(connection: connection, path: "/x", direction: .in, kind: kind, data: data)
    }

    @Test(
        "a predicate that reads the journal does not deadlock: on an entry already there, on one appended later, and on one appended while the wait registers"
    )
    func predicateReadsTheJournal() async throws {
        let journal = ScriptJournal()
        journal.append(Self.entry(1))
        try await withTimeout(.seconds(10)) {
            // Already there: the predicate asks the journal how many entries it has.
            let first = try await journal.first(within: .seconds(5)) { _ in journal.entries.count == 1 }
            #expect(first.connection == 1)
            // Appended later: the append runs the waiting predicate, which reads the journal.
            let waiting = Task { try await journal.first(within: .seconds(5)) { $0.connection == 3 && journal.entries.count >= 3 } }
            journal.append(Self.entry(2))
            journal.append(Self.entry(3))
            #expect(try await waiting.value.connection == 3)
            // Many appends while many waits register, each predicate reading the journal.
            try await withThrowingTaskGroup(of: Int.self) { group in
                for n in 4..<54 {
                    group.addTask { try await journal.first(within: .seconds(5)) { $0.connection == n && !journal.entries.isEmpty }.connection }
                }
                group.addTask {
                    for n in 4..<54 { journal.append(Self.entry(n)) }
                    return 0
                }
                var found: Set<Int> = []
                for try await connection in group where connection > 0 { found.insert(connection) }
                #expect(found == Set(4..<54), "every wait got its entry, none missed while registering")
            }
        }
    }

    @Test("the journal keeps its newest entries past the limit and counts the ones let go")
    func keepsTheNewest() {
        let journal = ScriptJournal(maxEntries: 3)
        for n in 1...10 { journal.append(Self.entry(n)) }
        #expect(journal.entries.map(\.connection) == [8, 9, 10])
        #expect(journal.droppedCount == 7)
    }
}
