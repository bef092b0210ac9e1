// A bare hummingbird-websocket echo server, the peer for Benchmarks/server_echo.sh: the stack
// duplex-server served /echo with before it moved /echo onto the event loop. Prints its URL.
//
//   swift build -c release --package-path Benchmarks --product hummingbird-echo-server
//   Benchmarks/.build/release/hummingbird-echo-server [PORT [EVENT_LOOPS]]
import Foundation
import Hummingbird
import HummingbirdWebSocket
import Logging
import NIOCore

let port = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) ?? 0 : 0
if CommandLine.arguments.count > 2, let loops = Int(CommandLine.arguments[2]), loops > 0 {
    NIOSingletons.groupLoopCountSuggestion = loops
}
let router = Router(context: BasicWebSocketRequestContext.self)
router.ws("echo") { inbound, outbound, _ in
    for try await message in inbound.messages(maxSize: 1 << 20) {
        switch message {
        case .text(let text): try await outbound.write(.text(text))
        case .binary(let buffer): try await outbound.write(.binary(buffer))
        }
    }
}
var logger = Logger(label: "hummingbird-echo-server")
logger.logLevel = .error
let application = Application(
    router: Router(),
    server: .http1WebSocketUpgrade(webSocketRouter: router, configuration: .init(ws: .init(maxFrameSize: 1 << 20))),
    configuration: .init(address: .hostname("127.0.0.1", port: port)),
    onServerRunning: { channel in
        // Unbuffered: the benchmark script reads the URL from a file while the server runs.
        FileHandle.standardOutput.write(Data("ws://127.0.0.1:\(channel.localAddress?.port ?? 0)/echo\n".utf8))
    },
    logger: logger
)
try await application.runService()
