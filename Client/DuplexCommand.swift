import ArgumentParser

/// `duplex`: the command-line client for WebSocket and Server-Sent Events servers, and the fault
/// proxy, the recorder and the replay server of the Duplex testbed.
@main
struct DuplexCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "duplex",
        abstract:
            "A WebSocket and Server-Sent Events client, a fault-injecting TCP proxy, a session recorder and replayer, and a message-level proxy to your backend.",
        discussion: """
            Start a server with `swift run duplex-server`, then for example:
              duplex chat ws://127.0.0.1:8080/chat/lobby --name alice
              duplex echo ws://127.0.0.1:8080/echo hello
              duplex ws ws://127.0.0.1:8080/echo
              duplex listen --json http://127.0.0.1:8080/events
              duplex proxy --listen 127.0.0.1:9000 --upstream 127.0.0.1:8080 --latency 200
              duplex record --upstream ws://127.0.0.1:8080 --out session.cassette
              duplex replay session.cassette --listen 127.0.0.1:8090
              duplex intercept --listen 127.0.0.1:9000 --upstream ws://127.0.0.1:8080 --rules rules.json

            Errors are one line on stderr, starting "duplex: ".

            \(Failure.exitStatusHelp)
            """,
        subcommands: [
            ChatCommand.self, EchoCommand.self, WSCommand.self, ListenCommand.self, ProxyCommand.self, RecordCommand.self, ReplayCommand.self,
            InterceptCommand.self,
        ]
    )
}
