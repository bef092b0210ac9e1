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
    /// Whether the server answers /health within 2 s (a connection the stopping listener queued
    /// but never serves counts as no answer).
    static func answers(_ port: Int) async -> Bool {
        (try? await withTimeout(.seconds(2)) { try await TestHTTPResponse.get(port: port, "/health") { $0.status == 200 } }) ?? false
    }

    @Test("a restart whose port another socket takes while the server is down keeps trying, and listens again once the port is free")
    func rebindsOnceThePortIsFree() async throws {
        try await withTimeout(.seconds(30)) {
            var configuration = DuplexServerConfiguration()
            configuration.holdsPortWhileRestarting = false
            try await withDuplexServer(configuration: configuration) { server in
                let port = server.port
                server.server.restart(downFor: .milliseconds(500))
                // Take the port as soon as the server lets go of it (as an outgoing connection
                // can, on a port from the ephemeral range).
                var squatter: (any Channel)?
                while squatter == nil {
                    squatter = try? await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: port).get()
                    if squatter == nil { try await Task.sleep(for: .milliseconds(2)) }  // polls for the port, within the timeout
                }
                // Hold it past the downtime, so the server's first attempts find it taken.
                try await Task.sleep(for: .seconds(1.5))
                try await squatter?.close()
                var healthy = false
                while !healthy {
                    healthy = await Self.answers(port)
                    if !healthy { try await Task.sleep(for: .milliseconds(20)) }  // polls until it listens, within the timeout
                }
                #expect(healthy)
            }
        }
    }

    @Test("while a restart is down the port stays reserved: connections are refused, nothing else can take it, and the server listens on it again")
    func holdsThePortWhileDown() async throws {
        try await withTimeout(.seconds(30)) {
            try await withDuplexServer { server in
                let port = server.port
                server.server.restart(downFor: .seconds(1))
                // Wait until the server no longer answers: it is down.
                while await Self.answers(port) {
                    try await Task.sleep(for: .milliseconds(5))  // polls for the restart, within the timeout
                }
                // Down (the listener closes as the shutdown starts; the port is held once it has
                // ended, which for an idle server takes milliseconds): nobody else can take it.
                try await Task.sleep(for: .milliseconds(300))
                let squatter = try? await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton).bind(host: "127.0.0.1", port: port).get()
                #expect(squatter == nil, "the port was free while the server was down")
                try? await squatter?.close()
                var healthy = false
                while !healthy {
                    healthy = await Self.answers(port)
                    if !healthy { try await Task.sleep(for: .milliseconds(20)) }  // polls until it listens, within the timeout
                }
                #expect(healthy)
            }
        }
    }
}
