import CoreMetrics
import Duplex
import DuplexTesting
import Foundation
import Logging
import MetricsTestKit
import NIOConcurrencyHelpers
import Testing

/// The lifecycle decides under the client's lock and acts outside it: what reaches code not
/// Duplex's (a metrics backend, a log handler) runs once the lock is released, so that code may
/// call back into the client.
@Suite("foreign code outside the client's lock")
struct ForeignCodeOutsideLockTests {
    /// Runs `probe` (which reads the client, taking its lock) on another thread and waits up to
    /// two seconds: a probe still waiting then was called while the lock was held. Nothing
    /// hangs: the probe finishes once the lock is released.
    final class Reentry: Sendable {
        let probe = NIOLockedValueBox<(@Sendable () -> Void)?>(nil)
        let calls = NIOLockedValueBox((made: 0, blocked: 0))
        let blockedAt = NIOLockedValueBox<[String]>([])

        func check(_ place: String) {
            guard let probe = probe.withLockedValue({ $0 }) else { return }
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                probe()
                done.signal()
            }
            let blocked = done.wait(timeout: .now() + 2) == .timedOut
            calls.withLockedValue {
                $0.made += 1
                if blocked { $0.blocked += 1 }
            }
            if blocked { blockedAt.withLockedValue { $0.append(place) } }
        }
    }

    /// TestMetrics, whose counters run the reentry check before they count.
    struct ReenteringMetrics: MetricsFactory {
        let base = TestMetrics()
        let reentry: Reentry

        final class CountingHandler: CounterHandler, Sendable {
            let base: any CounterHandler
            let reentry: Reentry
            let label: String
            init(base: any CounterHandler, reentry: Reentry, label: String) {
                self.base = base
                self.reentry = reentry
                self.label = label
            }
            func increment(by amount: Int64) {
                reentry.check(label)
                base.increment(by: amount)
            }
            func reset() { base.reset() }
        }

        func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
            CountingHandler(base: base.makeCounter(label: label, dimensions: dimensions), reentry: reentry, label: label)
        }
        func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
            base.makeFloatingPointCounter(label: label, dimensions: dimensions)
        }
        func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
            base.makeRecorder(label: label, dimensions: dimensions, aggregate: aggregate)
        }
        func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
            base.makeMeter(label: label, dimensions: dimensions)
        }
        func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
            base.makeTimer(label: label, dimensions: dimensions)
        }
        func destroyCounter(_ handler: any CounterHandler) {}
        func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {}
        func destroyRecorder(_ handler: any RecorderHandler) {}
        func destroyMeter(_ handler: any MeterHandler) {}
        func destroyTimer(_ handler: any TimerHandler) {}
    }

    /// A log handler that runs the reentry check for each line.
    struct ReenteringLogHandler: LogHandler {
        let reentry: Reentry
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .info
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) { reentry.check("log: \(event.message)") }
    }

    @Test(
        "a metrics backend and a log handler that read the socket's state, as a connection is made, sends, is lost and comes back, never wait on its lock"
    )
    func metricsAndLogsReenter() async throws {
        try await withTimeout(.seconds(60)) {
            try await withDuplexServer { server in
                let reentry = Reentry()
                var configuration = WebSocketConfiguration(reconnection: .fixedDelay(.milliseconds(20)))
                configuration.metrics = ReenteringMetrics(reentry: reentry)
                configuration.logger = Logger(label: "reentry") { _ in ReenteringLogHandler(reentry: reentry) }
                let socket = WebSocket(url: server.webSocketURL("/echo"), configuration: configuration)
                reentry.probe.withLockedValue { $0 = { _ = socket.state } }
                let messages = socket.messages
                let states = socket.stateEvents
                try await socket.connect()
                try await socket.send("hello")
                _ = try await messages.first(within: .seconds(20)) { _ in true }
                #expect(server.server.dropConnections(.route("echo")) == 1)
                _ = try await states.first(within: .seconds(20)) { if case .disconnected = $0 { true } else { false } }
                _ = try await states.first(within: .seconds(20)) { $0 == .connected }
                await socket.terminate()
                let calls = reentry.calls.withLockedValue { $0 }
                #expect(calls.made >= 4, "attempts, a message out, the loss, the reconnection log line: \(calls)")
                #expect(calls.blocked == 0, "called while the client's lock was held: \(reentry.blockedAt.withLockedValue { $0 })")
            }
        }
    }
}
