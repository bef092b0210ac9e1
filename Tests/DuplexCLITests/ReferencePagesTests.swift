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
        #expect(subcommands.count == 7)
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
