import DuplexServer
import Logging
import ServiceLifecycle

let server = DuplexServer(configuration: .init(port: 0))
let group = ServiceGroup(configuration: .init(services: [server], logger: Logger(label: "test")))
try await withThrowingTaskGroup(of: Void.self) { tasks in
    tasks.addTask { try await group.run() }
    let port = try await server.port()  // the port it listens on, once it does
    print("ws://127.0.0.1:\(port)/echo")  // … your client, on that port …
    await group.triggerGracefulShutdown()
    try await tasks.waitForAll()
}
