import ArgumentParser
@testable import duplex
@testable import duplex_server
import Foundation
import Testing

/// The reference pages stay true to `--help`: every flag of `duplex-server` is in
/// docs/server.md, and every subcommand of `duplex`, with each of its flags, in docs/cli.md.
@Suite("docs/server.md and docs/cli.md against --help")
struct ReferencePagesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func page(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// The long flags a help text lists in its options (`--name`), `--help` and `--version` aside.
    static func flags(inHelp help: String) -> Set<String> {
        guard let options = help.range(of: "OPTIONS:") else { return [] }
        let flags = help[options.upperBound...].matches(of: /(?:^|[\s,\[])(--[a-z0-9][a-z0-9-]*)/.anchorsMatchLineEndings())
            .map { String($0.output.1) }
        return Set(flags).subtracting(["--help", "--version"])
    }

    /// Whether `page` names `flag` as a flag: in backquotes, as `--flag`, `--flag VALUE` or in a
    /// list such as `--tls-cert`, `--tls-key`.
    static func mentions(_ page: String, _ flag: String) -> Bool {
        page.contains("`\(flag)`") || page.contains("`\(flag) ") || page.contains("`\(flag)=") || page.contains(" \(flag) ")
            || page.contains("\(flag)`")
    }

    @Test("every flag of duplex-server --help is in docs/server.md")
    func serverFlags() throws {
        let help = DuplexServerCommand.helpMessage(columns: 1000)
        let flags = Self.flags(inHelp: help)
        #expect(flags.count > 30, "the flags of duplex-server --help were not read:\n\(help)")
        let page = try Self.page("docs/server.md")
        for flag in flags.sorted() {
            let described = Self.mentions(page, flag)
            #expect(described, "docs/server.md does not describe duplex-server \(flag)")
        }
    }

    @Test("every subcommand of duplex, and each of its flags, is in docs/cli.md")
    func cliFlags() throws {
        let page = try Self.page("docs/cli.md")
        let subcommands = DuplexCommand.configuration.subcommands
        #expect(subcommands.count == 8)
        for subcommand in subcommands {
            let name = try #require(subcommand.configuration.commandName)
            let listed = page.contains("`\(name) ") || page.contains("`\(name)`")
            #expect(listed, "docs/cli.md has no row for duplex \(name)")
            let help = DuplexCommand.helpMessage(for: subcommand, columns: 1000)
            let flags = Self.flags(inHelp: help)
            #expect(!flags.isEmpty, "the flags of duplex \(name) --help were not read:\n\(help)")
            for flag in flags.sorted() {
                let described = Self.mentions(page, flag)
                #expect(described, "docs/cli.md does not describe duplex \(name) \(flag)")
            }
        }
    }

    /// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
    static func anchor(_ heading: String) -> String {
        let kept = heading.lowercased().filter { $0.isLetter || $0.isNumber || $0 == " " || $0 == "-" || $0 == "_" }
        return String(kept.map { $0 == " " ? "-" : $0 })
    }

    /// The anchors of a Markdown file's headings, outside code blocks, numbered as GitHub does
    /// when a heading repeats.
    static func anchors(in text: String) -> Set<String> {
        var anchors: Set<String> = []
        var seen: [String: Int] = [:]
        var inCode = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") { inCode.toggle() }
            guard !inCode, line.hasPrefix("#"), let space = line.firstIndex(of: " ") else { continue }
            let base = anchor(String(line[line.index(after: space)...]))
            let count = seen[base, default: 0]
            seen[base] = count + 1
            anchors.insert(count == 0 ? base : "\(base)-\(count)")
        }
        return anchors
    }

    @Test("every relative link of README, docs/ and Benchmarks/README.md leads to a file, and its anchor to a heading there")
    func links() throws {
        let files = FileManager.default
        var pages = ["README.md", "Benchmarks/README.md"]
        pages += try files.contentsOfDirectory(atPath: Self.root.appendingPathComponent("docs").path)
            .filter { $0.hasSuffix(".md") }.map { "docs/\($0)" }
        var checked = 0
        for page in pages {
            let text = try Self.page(page)
            let folder = (page as NSString).deletingLastPathComponent
            for match in text.matches(of: /\]\(([^)\s]+)\)/) {
                let target = String(match.output.1)
                guard !target.contains("://"), !target.hasPrefix("mailto:") else { continue }
                let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
                let path = parts[0].isEmpty ? page : (folder as NSString).appendingPathComponent(parts[0])
                let url = Self.root.appendingPathComponent(path).standardizedFileURL
                let exists = files.fileExists(atPath: url.path)
                #expect(exists, "\(page): the link \(target) leads to no file")
                if exists, parts.count == 2, path.hasSuffix(".md") {
                    let anchors = Self.anchors(in: try String(contentsOf: url, encoding: .utf8))
                    let found = anchors.contains(parts[1])
                    #expect(found, "\(page): the link \(target) names no heading of \(path)")
                }
                checked += 1
            }
        }
        #expect(checked > 50, "the pages' links were not read")
    }

    @Test("README stays a front door: at most about 250 lines, with the two set-up commands and the three paths")
    func readme() throws {
        let readme = try Self.page("README.md")
        #expect(readme.split(separator: "\n", omittingEmptySubsequences: false).count <= 260)
        for line in [
            "swift run duplex-server", "swift test", "## Run a local test server", "## Test your client against it", "## Chat between two terminals",
        ] {
            #expect(readme.contains(line), "README lost \(line)")
        }
    }
}
