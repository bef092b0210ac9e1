import DuplexServer
import NIOCore
import NIOPosix
import DuplexTesting
import Logging
import ServiceLifecycle
import Testing

@Suite("graceful shutdown")
struct ShutdownTests {
    @Test("a graceful shutdown closes WebSockets with 1001 and ends SSE streams, then run() returns")
    func gracefulShutdown() async throws {
        try await withTimeout {
            let server = DuplexServer(configuration: .init(port: 0), logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() }))
            let group = ServiceGroup(configuration: .init(services: [server], gracefulShutdownSignals: [], logger: Logger(label: "test")))
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                let port = try await server.port()
                try await TestWebSocket.with(port: port, path: "/chat/bye?name=a") { chat in
                    _ = try await chat.receiveWelcome()
                    try await TestWebSocket.with(port: port, path: "/echo") { echo in
                        try await echo.sendText("warm")
                        _ = try await echo.receiveText()
                        try await TestHTTPResponse.get(port: port, "/events?interval=50") { events in
                            _ = try await events.nextEvent()
                            #expect(server.connectionCount == 3)
                            await group.triggerGracefulShutdown()
                            let echoClose = try await echo.receiveClose()
                            #expect(echoClose.code == 1001)
                            #expect(echoClose.reason == "server shutting down")
                            try? await echo.sendClose(code: 1001)
                            #expect(try await chat.receiveClose().code == 1001)
                            try? await chat.sendClose(code: 1001)
                            while try await events.nextEvent() != nil {}
                        }
                    }
                }
                try await tasks.waitForAll()
            }
            #expect(server.connectionCount == 0)
        }
    }

    @Test("port() reports a failure to listen instead of hanging")
    func portInUse() async throws {
        try await withTimeout {
            try await withDuplexServer { running in
                let second = DuplexServer(
                    configuration: .init(port: running.port),
                    logger: Logger(label: "test", factory: { _ in SwiftLogNoOpLogHandler() })
                )
                await #expect(throws: (any Error).self) {
                    try await withThrowingTaskGroup(of: Void.self) { tasks in
                        tasks.addTask { try await second.run() }
                        _ = try await second.port()
                    }
                }
            }
        }
    }
}

@Suite("restart on a port taken meanwhile")
struct RestartRebindTests {
    /// Whether the server answers /health within 10 s (a connection the stopping listener queued
    /// but never serves counts as no answer).
    static func answers(_ port: Int) async -> Bool {
        do {
            return try await withTimeout(.seconds(10)) { try await TestHTTPResponse.get(port: port, "/health") { $0.status == 200 } }
        } catch {
            Issue.record("GET /health on port \(port): \(error)")
            return false
        }
    }

    @Test("a restart whose port another socket takes while the server is down keeps trying, and listens again once the port is free")
    func rebindsOnceThePortIsFree() async throws {
        try await withTimeout(.seconds(30)) {
            var configuration = DuplexServerConfiguration()
            configuration.holdsPortWhileRestarting = false
            let (logger, lines) = WatchedLogger.make()
            try await withDuplexServer(configuration: configuration, logger: logger) { server in
                let port = server.port
                server.server.restart(downFor: .milliseconds(500))
                // "restarting" is logged once the listener is closed; with no reservation, the
                // port is free then: take it (as an outgoing connection can, on a port from the
                // ephemeral range).
                _ = try await lines.first(within: .seconds(10)) { $0.message == "restarting" }
                let squatter = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: port).get()
                // Hold it until the server finds it taken and says it tries again.
                // first(within:) throws if the warning never comes: the retry must have happened.
                _ = try await lines.first(within: .seconds(10)) { $0.message.contains("port in use after a restart") }
                try await squatter.close()
                // The server says when it listens again; then it answers.
                _ = try await lines.first(within: .seconds(10)) { $0.message == "listening" }
                #expect(await Self.answers(port))
            }
        }
    }

    @Test("while a restart is down the port stays reserved: connections are refused, nothing else can take it, and the server listens on it again")
    func holdsThePortWhileDown() async throws {
        try await withTimeout(.seconds(30)) {
            let (logger, lines) = WatchedLogger.make()
            try await withDuplexServer(logger: logger) { server in
                let port = server.port
                server.server.restart(downFor: .seconds(1))
                // "restarting" is logged once the port is held: from then on, nobody else can take it.
                _ = try await lines.first(within: .seconds(10)) { $0.message == "restarting" }
                let squatter = try? await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: port).get()
                #expect(squatter == nil, "the port was free while the server was down")
                try? await squatter?.close()
                // The server says when it listens again; then it answers.
                _ = try await lines.first(within: .seconds(10)) { $0.message == "listening" }
                #expect(await Self.answers(port))
            }
        }
    }
}
