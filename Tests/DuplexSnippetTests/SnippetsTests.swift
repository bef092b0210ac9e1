import Foundation
import TestSupport
import Testing

/// The Swift snippets users read, checked to be the code this target compiles.
///
/// Every ` ```swift ` block of README.md, `docs/*.md` and the DocC articles
/// (`Sources/*/*.docc/*.md`) is in a file of `Snippets/` (whole programs, which `swift build`
/// builds as SwiftPM snippets) or of this target (tests, and fragments inside functions) as shown:
/// - a block that starts with its imports is the beginning of a file, imports and all, so it
///   compiles with exactly the imports a reader sees (what follows it in the file, if anything,
///   only supplies what the text around the block says is yours);
/// - any other block is inside a file, line for line, at any one indentation;
/// - a block that is a package manifest (`import PackageDescription`) is parsed by
///   `swift package dump-package` in a package of its own.
///
/// When a snippet changes, change its file here with it: this test then says which one differs.
@Suite("Snippets of README, docs/ and DocC, as compiled")
struct SnippetsTests {
    struct Snippet: CustomStringConvertible {
        var document: String
        var line: Int
        var lines: [String]
        var description: String { "\(document):\(line)" }
        var isManifest: Bool { lines.contains("import PackageDescription") }
        var startsWithImports: Bool { lines.first?.hasPrefix("import ") ?? false }
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// README.md, docs/*.md and every DocC article, as paths from the package's root.
    static func documents() throws -> [String] {
        let files = FileManager.default
        var paths = ["README.md"]
        paths += try files.contentsOfDirectory(atPath: root.appendingPathComponent("docs").path)
            .filter { $0.hasSuffix(".md") }.map { "docs/\($0)" }
        for target in try files.contentsOfDirectory(atPath: root.appendingPathComponent("Sources").path) {
            let sources = "Sources/\(target)"
            for entry in (try? files.contentsOfDirectory(atPath: root.appendingPathComponent(sources).path)) ?? []
            where entry.hasSuffix(".docc") {
                paths += try files.contentsOfDirectory(atPath: root.appendingPathComponent("\(sources)/\(entry)").path)
                    .filter { $0.hasSuffix(".md") }.map { "\(sources)/\(entry)/\($0)" }
            }
        }
        return paths.sorted()
    }

    static func snippets() throws -> [Snippet] {
        var found: [Snippet] = []
        for document in try documents() {
            let text = try String(contentsOf: root.appendingPathComponent(document), encoding: .utf8)
            var current: Snippet?
            for (index, line) in text.components(separatedBy: "\n").enumerated() {
                if var snippet = current {
                    if line.trimmingCharacters(in: .whitespaces) == "```" {
                        found.append(snippet)
                        current = nil
                    } else {
                        snippet.lines.append(line)
                        current = snippet
                    }
                } else if line == "```swift" {
                    current = Snippet(document: document, line: index + 2, lines: [])
                }
            }
        }
        return found
    }

    /// The Swift files of `Snippets/` (whole programs, which `swift build` builds) and of this
    /// target but this one, as lines.
    static func compiledFiles() throws -> [(path: String, lines: [String])] {
        var files: [(path: String, lines: [String])] = []
        for folder in ["Snippets", "Tests/DuplexSnippetTests"] {
            let url = root.appendingPathComponent(folder)
            let paths = FileManager.default.enumerator(atPath: url.path)?.compactMap { $0 as? String } ?? []
            for path in paths.sorted() where path.hasSuffix(".swift") && path != "SnippetsTests.swift" {
                let text = try String(contentsOf: url.appendingPathComponent(path), encoding: .utf8)
                files.append(("\(folder)/\(path)", text.components(separatedBy: "\n")))
            }
        }
        return files
    }

    /// Whether `snippet` is in `file` as the rules above say.
    static func contains(_ file: [String], _ snippet: Snippet) -> Bool {
        let lines = snippet.lines
        guard !lines.isEmpty, file.count >= lines.count else { return false }
        if snippet.startsWithImports {
            guard Array(file.prefix(lines.count)) == lines else { return false }
            return !file.dropFirst(lines.count).contains { $0.hasPrefix("import ") }
        }
        guard let first = lines.first(where: { !$0.isEmpty }), let firstIndex = lines.firstIndex(of: first) else { return false }
        for start in 0...(file.count - lines.count) {
            let candidate = file[start + firstIndex]
            guard candidate.hasSuffix(first) else { continue }
            let indent = String(candidate.dropLast(first.count))
            guard indent.allSatisfy({ $0 == " " }) else { continue }
            let matches = lines.indices.allSatisfy { offset in
                let line = file[start + offset]
                return lines[offset].isEmpty ? line.trimmingCharacters(in: .whitespaces).isEmpty : line == indent + lines[offset]
            }
            if matches { return true }
        }
        return false
    }

    @Test("every Swift snippet of README, docs/ and DocC is compiled here as shown")
    func everySnippetIsCompiled() throws {
        let snippets = try Self.snippets()
        let files = try Self.compiledFiles()
        #expect(snippets.count > 20, "the documents' snippets were not found")
        for snippet in snippets where !snippet.isManifest {
            #expect(
                files.contains { Self.contains($0.lines, snippet) },
                "\(snippet): this snippet is not in Snippets/ or Tests/DuplexSnippetTests as shown:\n\(snippet.lines.joined(separator: "\n"))"
            )
        }
    }

    @Test("every package manifest snippet parses in a package of its own, and names products this package has")
    func manifestsParse() async throws {
        let manifests = try Self.snippets().filter(\.isManifest)
        #expect(!manifests.isEmpty, "README's Package.swift was not found")
        let ours = try String(contentsOf: Self.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        let products = Set(ours.matches(of: /\.library\(name: "([A-Za-z]+)"/).map { String($0.output.1) })
        #expect(products.contains("DuplexTesting"), "Package.swift's products were not read")
        for manifest in manifests {
            for named in manifest.lines.joined().matches(of: /\.product\(name: "([A-Za-z]+)"/) {
                #expect(products.contains(String(named.output.1)), "\(manifest): no product \(named.output.1) in Package.swift")
            }
            let folder = FileManager.default.temporaryDirectory.appendingPathComponent("duplex-snippet-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: folder) }
            let package = folder.appendingPathComponent("MyApp")
            // Every target of the manifest gets a source file, as in a user's package.
            for path in ["Sources/MyApp/MyApp.swift", "Tests/MyAppTests/MyAppTests.swift"] {
                let file = package.appendingPathComponent(path)
                try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
                try Data("\n".utf8).write(to: file)
            }
            try Data((manifest.lines.joined(separator: "\n") + "\n").utf8).write(to: package.appendingPathComponent("Package.swift"))
            // Seconds of `swift package`, waited for on a thread of its own: on the cooperative
            // pool (two threads in CI) it stalled every other test, failing their time limits.
            let (status, text) = try await onThread {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                process.arguments = ["swift", "package", "--package-path", package.path, "dump-package"]
                let output = Pipe()
                process.standardOutput = output
                process.standardError = output
                try process.run()
                let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                process.waitUntilExit()
                return (process.terminationStatus, text)
            }
            #expect(status == 0, "\(manifest): swift package dump-package failed:\n\(text)")
            #expect(text.contains("\"DuplexTesting\""), "\(manifest): the manifest does not name DuplexTesting:\n\(text)")
            if manifest.document == "README.md" {
                // The normal case: the app's target wraps the client, its tests add the helpers.
                let products = Self.productsByTarget(in: Data(text.utf8))
                #expect(products["MyApp"] == ["Duplex"], "\(manifest): the app's target gets Duplex: \(products)")
                #expect(products["MyAppTests"]?.contains("DuplexTesting") == true, "\(manifest): its tests get DuplexTesting: \(products)")
            }
        }
    }

    /// The products each target of a `dump-package` output depends on, by target name.
    static func productsByTarget(in dump: Data) -> [String: [String]] {
        guard let root = try? JSONSerialization.jsonObject(with: dump) as? [String: Any],
            let targets = root["targets"] as? [[String: Any]]
        else { return [:] }
        var products: [String: [String]] = [:]
        for target in targets {
            guard let name = target["name"] as? String else { continue }
            let dependencies = target["dependencies"] as? [[String: Any]] ?? []
            products[name] = dependencies.compactMap { ($0["product"] as? [Any])?.first as? String }
        }
        return products
    }
}
