import Foundation
import NIOCore
import NIOPosix
import TestSupport
import Testing

/// A real proxy from Debian, started for one test on a free loopback port: tinyproxy (HTTP
/// CONNECT, optionally with basic authentication or allowed only to port 443) or dante (SOCKS5).
/// Its log goes to its stderr, where a test checks that a connection went through it.
final class ProxyPeer: Sendable {
    let port: Int
    let process: CLIProcess
    private let directory: URL

    /// Whether the proxy programs are installed. CI requires them (`DUPLEX_REQUIRE_PROXIES=1`):
    /// there, a missing one fails instead of skipping.
    static var available: Bool {
        let present = FileManager.default.isExecutableFile(atPath: tinyproxy) && FileManager.default.isExecutableFile(atPath: danted)
        if !present, ProcessInfo.processInfo.environment["DUPLEX_REQUIRE_PROXIES"] == "1" { return true }  // run, and fail loudly
        return present
    }

    static let tinyproxy = "/usr/bin/tinyproxy"
    static let danted = "/usr/sbin/danted"

    private init(port: Int, process: CLIProcess, directory: URL) {
        self.port = port
        self.process = process
        self.directory = directory
    }

    struct Missing: Error, CustomStringConvertible {
        var program: String
        var description: String { "\(program) is not installed (Debian: apt-get install tinyproxy dante-server)" }
    }

    /// tinyproxy, logging every connection it opens.
    static func http(basicAuth: (user: String, password: String)? = nil, onlyPort443: Bool = false) async throws -> ProxyPeer {
        guard FileManager.default.isExecutableFile(atPath: tinyproxy) else { throw Missing(program: tinyproxy) }
        let port = try await freePort()
        var lines = ["Port \(port)", "Listen 127.0.0.1", "Timeout 30", "LogLevel Connect", "MaxClients 50", "Allow 127.0.0.1"]
        if let basicAuth { lines.append("BasicAuth \(basicAuth.user) \(basicAuth.password)") }
        if onlyPort443 { lines.append("ConnectPort 443") }
        // tinyproxy binds its port before it sets up its log, whose last line at start is this.
        return try await start(tinyproxy, config: lines, arguments: { ["-d", "-c", $0] }, port: port, ready: "done sending stored logs")
    }

    /// dante, a SOCKS5 proxy with no authentication, logging every connection it opens.
    static func socks5() async throws -> ProxyPeer {
        guard FileManager.default.isExecutableFile(atPath: danted) else { throw Missing(program: danted) }
        let port = try await freePort()
        var lines = ["logoutput: stderr", "internal: 127.0.0.1 port = \(port)", "external: 127.0.0.1", "socksmethod: none", "clientmethod: none"]
        // Settings come before the rules.
        if getuid() == 0 { lines += ["user.privileged: root", "user.unprivileged: nobody"] }
        lines += [
            "client pass { from: 127.0.0.1/32 to: 0.0.0.0/0 log: connect }",
            "socks pass { from: 127.0.0.1/32 to: 0.0.0.0/0 log: connect }",
        ]
        // dante says it is running once its internal address is bound.
        return try await start(danted, config: lines, arguments: { ["-f", $0, "-N", "1"] }, port: port, ready: "running")
    }

    /// Starts `program` and waits for the line of its log that says it listens (`ready`).
    private static func start(
        _ program: String, config: [String], arguments: (String) -> [String], port: Int, ready: String
    ) async throws -> ProxyPeer {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("duplex-proxy-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("proxy.conf")
        try (config.joined(separator: "\n") + "\n").write(to: file, atomically: true, encoding: .utf8)
        let process = try CLIProcess(executable: URL(fileURLWithPath: program), arguments(file.path))
        let peer = ProxyPeer(port: port, process: process, directory: directory)
        do {
            try await peer.waitForLog(ready)
        } catch {
            peer.stop()
            throw error
        }
        return peer
    }

    /// Waits until the proxy's log (stdout or stderr) contains `text`.
    func waitForLog(_ text: String) async throws {
        _ = try await process.wait("the proxy's log to contain \(text.debugDescription)", within: .seconds(20)) {
            $0.stdout.contains(text) || $0.stderr.contains(text)
        }
    }

    /// The proxy's log so far.
    var log: String { process.output.stdout + process.output.stderr }

    func stop() {
        process.signal(SIGKILL)
        try? FileManager.default.removeItem(at: directory)
    }

    private static func freePort() async throws -> Int {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: 0).get()
        let port = channel.localAddress?.port ?? 0
        try await channel.close()
        return port
    }
}
