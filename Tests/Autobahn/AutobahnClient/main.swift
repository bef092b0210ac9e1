import Duplex
import DuplexSchema
import Foundation

/// `autobahn-client`: drives the Duplex WebSocket client through Autobahn|Testsuite's fuzzing
/// server (`wstest -m fuzzingserver`). For every case it opens `/runCase`, echoes each message it
/// receives until the server closes, then asks the server to write its reports.
///
/// Usage: `autobahn-client ws://127.0.0.1:9001 [AGENT] [CASES]`, where CASES is a range such as
/// `1-10` (every case by default). The client offers permessage-deflate, as an application that
/// turns compression on does, and accepts messages up to 64 MiB (the suite sends 16 MiB).
@main
struct AutobahnClient {
    static func main() async throws {
        let arguments = CommandLine.arguments.dropFirst()
        guard let base = arguments.first else {
            FileHandle.standardError.write(Data("usage: autobahn-client ws://HOST:PORT [AGENT] [FIRST-LAST]\n".utf8))
            exit(2)
        }
        let agent = arguments.dropFirst().first ?? "duplex"
        let count = try await caseCount(base: base)
        var cases = 1...count
        if let range = arguments.dropFirst(2).first {
            let bounds = range.split(separator: "-").compactMap { Int($0) }
            guard bounds.count == 2, bounds[0] >= 1, bounds[0] <= bounds[1] else {
                FileHandle.standardError.write(Data("autobahn-client: bad case range \(range)\n".utf8))
                exit(2)
            }
            cases = bounds[0]...min(bounds[1], count)
        }
        print("autobahn-client: \(count) cases, running \(cases.lowerBound)-\(cases.upperBound) as \(agent)")
        for number in cases {
            let started = ContinuousClock.now
            let outcome = await runCase(base: base, number: number, agent: agent)
            let elapsed = ContinuousClock.now - started
            if outcome != nil || elapsed > .seconds(5) {
                print("case \(number): \(outcome ?? "done") in \(elapsed)")
            }
        }
        try await updateReports(base: base, agent: agent)
        print("autobahn-client: reports updated")
    }

    static func configuration() -> WebSocketConfiguration {
        WebSocketConfiguration(
            maxMessageBytes: 64 * 1024 * 1024,
            connectTimeout: .seconds(30),
            streamBufferBytes: 128 * 1024 * 1024,
            sendBufferHighWatermark: 64 * 1024 * 1024,
            compression: PerMessageDeflate()
        )
    }

    /// Reads the number of cases from `/getCaseCount`.
    static func caseCount(base: String) async throws -> Int {
        let socket = WebSocket(url: "\(base)/getCaseCount", configuration: configuration())
        let messages = socket.messages
        try await socket.connect()
        for await message in messages {
            await socket.terminate()
            guard let text = message.text, let count = Int(text) else { break }
            return count
        }
        throw CocoaError(.fileReadCorruptFile, userInfo: [NSLocalizedDescriptionKey: "no case count from \(base)"])
    }

    /// Runs one case: echoes until the connection ends. Returns a note when something other than
    /// the suite's own close happened (the suite judges the case either way).
    static func runCase(base: String, number: Int, agent: String) async -> String? {
        let socket = WebSocket(url: "\(base)/runCase?case=\(number)&agent=\(agent)", configuration: configuration())
        let events = socket.events
        do {
            try await socket.connect()
        } catch {
            await socket.terminate()
            return "connect failed: \(error)"
        }
        // A case that has not ended after 120 s (the suite's own limits are shorter) is ended
        // here, so a hang shows as a failed case instead of a stuck run.
        let watchdog = Task {
            try await Task.sleep(for: .seconds(120))
            await socket.terminate()
        }
        defer { watchdog.cancel() }
        var note: String?
        loop: for await event in events {
            switch event {
            case .message(let message):
                do { try await socket.send(message) } catch { note = "send failed: \(error)" }
            case .disconnected:
                break loop
            case .connected, .error:
                continue
            }
        }
        await socket.terminate()
        return note
    }

    /// Asks the suite to write its reports for `agent`.
    static func updateReports(base: String, agent: String) async throws {
        let socket = WebSocket(url: "\(base)/updateReports?agent=\(agent)", configuration: configuration())
        let events = socket.events
        try await socket.connect()
        for await event in events {
            if case .disconnected = event { break }
        }
        await socket.terminate()
    }
}
