import Foundation
import TestSupport
import Testing

/// The fuzz targets' checked-in corpora (`Tests/Fuzz/Corpus/TARGET`), replayed through the same
/// checks by the plain debug build of `duplex-fuzz`: every input a fuzzer ever crashed is kept
/// there, so each one stays a regression test of `swift test`.
@Suite("fuzz corpora replayed")
struct FuzzCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/Corpus")

    static let targets = ["sse", "chat-frames", "ws-server", "ws-engines", "ws-parser", "inflate", "resume", "utf8"]

    @Test("every target knows its corpus, and every corpus has a target")
    func targetsMatchCorpora() async throws {
        let folders = try FileManager.default.contentsOfDirectory(atPath: Self.corpus.path).sorted()
        #expect(folders == Self.targets.sorted())
        let listed = try await CLIProcess("duplex-fuzz", ["--list"]).waitForExit()
        #expect(listed.status == 0)
        for target in Self.targets {
            #expect(listed.stdout.contains("\(target): "), "duplex-fuzz --list names \(target)")
        }
    }

    @Test("each corpus replays with every property holding", arguments: targets)
    func replay(target: String) async throws {
        let folder = Self.corpus.appendingPathComponent(target)
        let count = try FileManager.default.contentsOfDirectory(atPath: folder.path).count
        #expect(count > 0)
        let output = try await CLIProcess("duplex-fuzz", [target, folder.path]).waitForExit(within: .seconds(120))
        #expect(output.status == 0, "\(output)")
        #expect(output.stdout.contains("\(target): \(count) inputs replayed, every property held"), "\(output)")
    }
}
