import DuplexTesting
package import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// A throwaway PostgreSQL cluster: `initdb` in a temporary folder, run as a non-root user (as
/// root, the `postgres` user, else `nobody`), listening on 127.0.0.1 on a free port, with trust
/// authentication and fsync off (a crash of the server keeps every commit; only an operating
/// system crash could lose some, which tests do not do). Stopped and removed by ``destroy()``.
///
/// The server's programs come from `DUPLEX_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`
/// (Debian's `postgresql` package). Without them, tests that need a cluster are skipped, unless
/// `DUPLEX_REQUIRE_POSTGRES=1` (as `.ci/run` sets), when they fail.
package final class PostgresCluster: Sendable {
    /// Where `initdb`, `pg_ctl` and `psql` are, if PostgreSQL is installed.
    package static let binDirectory: URL? = {
        if let path = ProcessInfo.processInfo.environment["DUPLEX_PG_BIN"] { return URL(fileURLWithPath: path) }
        let root = "/usr/lib/postgresql"
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return versions.compactMap(Int.init).sorted().last.map { URL(fileURLWithPath: "\(root)/\($0)/bin") }
            .flatMap { FileManager.default.isExecutableFile(atPath: $0.appendingPathComponent("initdb").path) ? $0 : nil }
    }()

    /// Whether PostgreSQL's programs are here.
    package static var isInstalled: Bool { binDirectory != nil }

    /// Whether a missing PostgreSQL must fail the tests instead of skipping them (CI).
    package static var isRequired: Bool { ProcessInfo.processInfo.environment["DUPLEX_REQUIRE_POSTGRES"] == "1" }

    /// Whether this run leaves the cluster tests to a run of their own
    /// (`DUPLEX_POSTGRES_TESTS=separately`): `.ci/run` runs them after the rest, with
    /// `swift test --filter PostgresStoreTests`, so that their server processes do not starve the
    /// timing-sensitive tests on a two-core machine.
    package static var runsSeparately: Bool { ProcessInfo.processInfo.environment["DUPLEX_POSTGRES_TESTS"] == "separately" }

    /// Whether tests that need a cluster run: PostgreSQL is installed, or it is required (so
    /// that they fail loudly); and they are not left to a run of their own.
    package static var testsEnabled: Bool { (isInstalled || isRequired) && !runsSeparately }

    /// Why they do not run.
    package static var disabledReason: String {
        runsSeparately ? "DUPLEX_POSTGRES_TESTS=separately: these run on their own (swift test --filter PostgresStoreTests)" : skipMessage
    }

    /// Why PostgreSQL tests are skipped.
    package static let skipMessage =
        "PostgreSQL is not installed (apt-get install postgresql, or set DUPLEX_PG_BIN); set DUPLEX_REQUIRE_POSTGRES=1 to fail instead of skipping"

    /// Its absence, when required.
    package struct Missing: Error, CustomStringConvertible {
        package var description: String {
            "PostgreSQL is required (DUPLEX_REQUIRE_POSTGRES=1) but its programs were not found: \(PostgresCluster.skipMessage)"
        }
    }

    /// A command that failed.
    package struct CommandFailed: Error, CustomStringConvertible {
        package var description: String
    }

    package let directory: URL
    package let port: Int
    /// The superuser role, which every test connects as.
    package let role = "duplex"
    private let runAs: String?
    private let bin: URL
    /// The running server (`postgres` itself, in the foreground: `pg_ctl` would leave it holding
    /// a descriptor by which Foundation learns that a child exited, so `pg_ctl` would never seem
    /// to finish).
    private let server = NIOLockedValueBox<CLIProcess?>(nil)

    private init(directory: URL, port: Int, runAs: String?, bin: URL) {
        self.directory = directory
        self.port = port
        self.runAs = runAs
        self.bin = bin
    }

    /// The data folder.
    package var dataDirectory: URL { directory.appendingPathComponent("data") }

    /// One cluster for the whole test run, made on first use (an `initdb` costs a second of CPU,
    /// which tests running beside it feel), stopped and removed when the test process exits.
    /// Tests that use it run one at a time (their suite is serialized), so one of them may
    /// restart it.
    package static var shared: PostgresCluster {
        get async throws { try await sharedCluster.value }
    }

    private static let sharedCluster = Task { () throws -> PostgresCluster in
        let cluster = try await start()
        sharedDirectory.withLockedValue { $0 = cluster.directory }
        atexit { PostgresCluster.removeShared() }
        return cluster
    }

    private static let sharedDirectory = NIOLockedValueBox<URL?>(nil)

    /// At exit: stops the shared cluster's server (SIGQUIT to the pid in `postmaster.pid`) and
    /// removes its folder.
    private static func removeShared() {
        guard let directory = sharedDirectory.withLockedValue({ $0 }) else { return }
        let pidFile = directory.appendingPathComponent("data/postmaster.pid")
        if let text = try? String(contentsOf: pidFile, encoding: .utf8), let pid = text.split(separator: "\n").first.flatMap({ Int32($0) }) {
            // It removes its pid file as it exits: watch the folder for that (inotify), then
            // send the signal, and wait on the removal, for a second at most.
            let watch = inotify_init1(Int32(IN_CLOEXEC))
            defer { if watch >= 0 { close(watch) } }
            if watch >= 0 { _ = inotify_add_watch(watch, pidFile.deletingLastPathComponent().path, UInt32(IN_DELETE)) }
            kill(pid, SIGQUIT)
            let deadline = ContinuousClock.now + .seconds(1)
            while watch >= 0, FileManager.default.fileExists(atPath: pidFile.path), ContinuousClock.now < deadline {
                var ready = pollfd(fd: watch, events: Int16(POLLIN), revents: 0)
                guard poll(&ready, 1, 1000) > 0 else { break }
                var events = [UInt8](repeating: 0, count: 4096)
                _ = read(watch, &events, events.count)
            }
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// Creates and starts a cluster.
    package static func start() async throws -> PostgresCluster {
        guard let bin = binDirectory else { throw Missing() }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("duplex-pg-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let runAs: String? = getuid() == 0 ? (userExists("postgres") ? "postgres" : "nobody") : nil
        if let runAs {
            // The non-root user owns the folder; the tests (root) can still read its log.
            _ = try await run(URL(fileURLWithPath: "/bin/chown"), ["-R", runAs, directory.path], as: nil)
        }
        let cluster = PostgresCluster(directory: directory, port: try await freePort(), runAs: runAs, bin: bin)
        do {
            try await cluster.command("initdb", ["-D", cluster.dataDirectory.path, "-A", "trust", "-U", cluster.role, "--no-sync", "-E", "UTF8"])
            try await cluster.startServer()
        } catch {
            await cluster.destroy()
            throw error
        }
        return cluster
    }

    /// Starts the server (after ``stop()``), on the same port, and waits until it accepts
    /// connections.
    package func startServer() async throws {
        let arguments = [
            "-D", dataDirectory.path, "-p", String(port), "-k", directory.path,
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
            "-c", "shared_buffers=16MB", "-c", "max_connections=60",
        ]
        let postgres = bin.appendingPathComponent("postgres")
        let process: CLIProcess
        if let runAs {
            process = try CLIProcess(executable: URL(fileURLWithPath: "/usr/sbin/runuser"), ["-u", runAs, "--", postgres.path] + arguments)
        } else {
            process = try CLIProcess(executable: postgres, arguments)
        }
        server.withLockedValue { $0 = process }
        try await process.waitForStderr("ready to accept connections", within: .seconds(60))
    }

    /// Stops the server at once (SIGQUIT, an immediate shutdown: connections are cut, as in a
    /// crash), and waits until it has exited.
    package func stop() async throws {
        guard
            let process = server.withLockedValue({ state in
                defer { state = nil }; return state
            })
        else { return }
        let pidFile = dataDirectory.appendingPathComponent("postmaster.pid")
        if let text = try? String(contentsOf: pidFile, encoding: .utf8), let pid = text.split(separator: "\n").first.flatMap({ Int32($0) }) {
            kill(pid, SIGQUIT)
        } else {
            process.signal(SIGQUIT)
        }
        try await process.waitForExitStatus(within: .seconds(30))
    }

    /// Stops and removes the cluster.
    package func destroy() async {
        try? await stop()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Creates a database and returns its URL for `--store`.
    package func createDatabase(_ name: String = "d\(UUID().uuidString.prefix(8).lowercased())") async throws -> String {
        try await psql("postgres", "CREATE DATABASE \(name)")
        return "postgres://\(role)@127.0.0.1:\(port)/\(name)"
    }

    /// Runs SQL with `psql`; returns its output (unaligned, tuples only).
    @discardableResult
    package func psql(_ database: String, _ sql: String) async throws -> String {
        try await Self.run(
            bin.appendingPathComponent("psql"),
            ["-h", "127.0.0.1", "-p", String(port), "-U", role, "-d", database, "-v", "ON_ERROR_STOP=1", "-At", "-c", sql], as: nil)
    }

    @discardableResult
    private func command(_ program: String, _ arguments: [String]) async throws -> String {
        try await Self.run(bin.appendingPathComponent(program), arguments, as: runAs)
    }

    private static func run(_ executable: URL, _ arguments: [String], as user: String?) async throws -> String {
        let process: CLIProcess
        if let user {
            process = try CLIProcess(executable: URL(fileURLWithPath: "/usr/sbin/runuser"), ["-u", user, "--", executable.path] + arguments)
        } else {
            process = try CLIProcess(executable: executable, arguments)
        }
        // Until its output has ended too: the exit can be seen before the pipe's last bytes are
        // read, and a query's answer would then be empty (a PostgreSQL test failed so, under
        // ThreadSanitizer). None of these programs leaves a child holding the pipes.
        let output = try await process.waitForExit(within: .seconds(60))
        guard output.status == 0 else {
            throw CommandFailed(description: "\(executable.lastPathComponent) \(arguments.joined(separator: " ")) failed: \(output)")
        }
        return output.stdout
    }

    private static func userExists(_ name: String) -> Bool {
        getpwnam(name) != nil
    }

    /// A port free now: bound to 0 and released.
    private static func freePort() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(host: "127.0.0.1", port: 0)
            .get()
        let port = channel.localAddress?.port ?? 0
        try await channel.close()
        return port
    }
}
