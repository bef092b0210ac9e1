import DuplexTesting
package import Foundation
import NIOConcurrencyHelpers

/// A built command-line program (`duplex`, `duplex-server`) run as a child process, with its
/// stdin writable and its output collected, and waits on that output, always with a time limit.
package final class CLIProcess: Sendable {
    package struct Output: Sendable, CustomStringConvertible {
        package var stdout = ""
        package var stderr = ""
        package var status: Int32?
        /// How many of stdout and stderr reached end of file.
        package var endedStreams = 0

        package var description: String { "status \(status.map(String.init) ?? "running")\n--- stdout:\n\(stdout)\n--- stderr:\n\(stderr)" }
    }

    /// The output fell short of what a test waited for.
    package struct WaitFailed: Error, CustomStringConvertible {
        package var what: String
        package var output: Output
        package var description: String { "timed out waiting for \(what); \(output)" }
    }

    private struct State {
        var output = Output()
        var waiters: [UInt64: (ready: @Sendable (Output) -> Bool, continuation: CheckedContinuation<Output, any Error>)] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let process: Process
    private let input: Pipe
    private let state = NIOLockedValueBox(State())

    /// The folder the test binary and the package's executables are built into.
    package static var binDirectory: URL {
        if let override = ProcessInfo.processInfo.environment["DUPLEX_BIN_DIR"] { return URL(fileURLWithPath: override) }
        let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var directory = executable.deletingLastPathComponent()
        // On Apple platforms the tests run inside an .xctest bundle.
        while directory.pathExtension == "xctest" || directory.lastPathComponent == "MacOS" || directory.lastPathComponent == "Contents" {
            directory.deleteLastPathComponent()
        }
        return directory
    }

    /// Starts `program` (a product of this package) with `arguments`.
    package convenience init(_ program: String, _ arguments: [String], environment: [String: String] = [:]) throws {
        try self.init(executable: Self.binDirectory.appendingPathComponent(program), arguments, environment: environment)
    }

    /// Starts any executable, such as `/bin/bash` running a pipeline of this package's programs.
    package init(executable: URL, _ arguments: [String], environment: [String: String] = [:]) throws {
        process = Process()
        process.executableURL = executable
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new }
        input = Pipe()
        let stdout = Pipe()
        let stderr = Pipe()
        process.standardInput = input
        process.standardOutput = stdout
        process.standardError = stderr
        process.terminationHandler = { [state] process in
            Self.update(state) { $0.status = process.terminationStatus }
        }
        try process.run()
        Self.drain(stdout.fileHandleForReading, into: state, \.stdout)
        Self.drain(stderr.fileHandleForReading, into: state, \.stderr)
    }

    deinit {
        if process.isRunning { process.terminate() }
    }

    /// Writes a line to the program's stdin.
    package func send(_ line: String) {
        input.fileHandleForWriting.write(Data((line + "\n").utf8))
    }

    /// Closes the program's stdin: end of input.
    package func closeInput() {
        try? input.fileHandleForWriting.close()
    }

    /// Sends SIGINT, SIGTERM or another signal.
    /// The process's id.
    package var pid: Int32 { process.processIdentifier }

    package func signal(_ number: Int32) {
        kill(process.processIdentifier, number)
    }

    package var output: Output { state.withLockedValue { $0.output } }

    /// Waits until stdout contains `text`.
    @discardableResult
    package func waitForStdout(_ text: String, within limit: Duration = .seconds(20)) async throws -> Output {
        try await wait("stdout to contain \(text.debugDescription)", within: limit) { $0.stdout.contains(text) }
    }

    /// Waits until stderr contains `text`.
    @discardableResult
    package func waitForStderr(_ text: String, within limit: Duration = .seconds(20)) async throws -> Output {
        try await wait("stderr to contain \(text.debugDescription)", within: limit) { $0.stderr.contains(text) }
    }

    /// Waits for the program to exit; returns its output, with the status.
    @discardableResult
    package func waitForExit(within limit: Duration = .seconds(30)) async throws -> Output {
        // The pipes may still hold the last bytes after the exit: wait for both to end too.
        try await wait("the program to exit", within: limit) { $0.status != nil && $0.endedStreams == 2 }
    }

    /// Waits for the program to exit, but not for its output to end: for a program whose
    /// children may hold its output open after it exits, as the PostgreSQL server's workers can.
    /// What it printed last may not have been read yet: to read output, use ``waitForExit(within:)``.
    @discardableResult
    package func waitForExitStatus(within limit: Duration = .seconds(30)) async throws -> Output {
        try await wait("the program to exit", within: limit) { $0.status != nil }
    }

    /// Waits until `ready` holds for the output so far.
    package func wait(_ what: String, within limit: Duration, until ready: @escaping @Sendable (Output) -> Bool) async throws -> Output {
        let id = state.withLockedValue { state in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        do {
            return try await withTimeout(limit) {
                try await withTaskCancellationHandler {
                    try await withCheckedThrowingContinuation { continuation in
                        let now: Output? = self.state.withLockedValue { state in
                            if ready(state.output) { return state.output }
                            state.waiters[id] = (ready, continuation)
                            return nil
                        }
                        if let now { continuation.resume(returning: now) }
                    }
                } onCancel: {
                    self.state.withLockedValue { $0.waiters.removeValue(forKey: id) }?.continuation.resume(throwing: CancellationError())
                }
            }
        } catch is TimeoutError {
            throw WaitFailed(what: what, output: output)
        }
    }

    private static func drain(_ handle: FileHandle, into state: NIOLockedValueBox<State>, _ field: any WritableKeyPath<Output, String> & Sendable) {
        let thread = Thread {
            while true {
                let data = handle.availableData
                if data.isEmpty { break }
                update(state) { $0[keyPath: field] += String(decoding: data, as: UTF8.self) }
            }
            update(state) { $0.endedStreams += 1 }
        }
        thread.start()
    }

    private static func update(_ state: NIOLockedValueBox<State>, _ change: (inout Output) -> Void) {
        let ready: [(CheckedContinuation<Output, any Error>, Output)] = state.withLockedValue { state in
            change(&state.output)
            var ready: [(CheckedContinuation<Output, any Error>, Output)] = []
            for (id, waiter) in state.waiters where waiter.ready(state.output) {
                state.waiters[id] = nil
                ready.append((waiter.continuation, state.output))
            }
            return ready
        }
        for (continuation, output) in ready { continuation.resume(returning: output) }
    }
}

extension CLIProcess {
    /// The listening line did not name a port.
    package struct NoPort: Error, CustomStringConvertible {
        package var output: Output
        package var description: String { "duplex-server said no port: \(output)" }
    }

    /// Starts the built `duplex-server` on a free port (unless `arguments` name one); returns
    /// it and the port from its listening line.
    package static func server(_ arguments: [String] = []) async throws -> (CLIProcess, Int) {
        let server = try CLIProcess("duplex-server", (arguments.contains("--port") ? [] : ["--port", "0"]) + arguments)
        let output = try await server.waitForStdout("duplex-server listening on http://127.0.0.1:")
        guard let line = output.stdout.split(separator: "\n").first(where: { $0.contains("listening on") }),
            let port = Int(line.split(separator: ":").last ?? "")
        else { throw NoPort(output: output) }
        return (server, port)
    }
}
