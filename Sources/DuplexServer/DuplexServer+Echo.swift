import DuplexSchema
import HummingbirdWebSocket
import NIOCore

extension DuplexServer {
    /// `WS /echo`: sends every message back with the same opcode, in order.
    ///
    /// Messages larger than `maxMessageBytes` get close 1009, invalid UTF-8 in a text message
    /// 1007, and protocol violations 1002: the errors the inbound stream throws carry those codes
    /// and are rethrown for the WebSocket handler to send.
    func serveEcho(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter, channel: any Channel) async throws {
        try await connections.withConnection(.init(kind: .webSocket, route: "echo")) { commands in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    try await self.obey(commands, outbound: outbound, channel: channel)
                }
                for try await message in inbound.messages(maxSize: configuration.maxMessageBytes) {
                    switch message {
                    case .text(let text): try await outbound.write(.text(text))
                    case .binary(let buffer): try await outbound.write(.binary(buffer))
                    }
                }
                group.cancelAll()
            }
        }
    }

    /// Carries out the registry's commands for one WebSocket connection. A stall turns reading
    /// off for its duration, and calls `onStall` so the connection's own writers wait.
    func obey(
        _ commands: AsyncStream<ConnectionCommand>,
        outbound: WebSocketOutboundWriter,
        channel: any Channel,
        onStall: @escaping @Sendable (Duration) -> Void = { _ in }
    ) async throws {
        for await command in commands {
            switch command {
            case .stall(let duration):
                onStall(duration)
                try await channel.setOption(ChannelOptions.autoRead, value: false).get()
                Task {
                    try? await Task.sleep(for: duration)
                    _ = try? await channel.setOption(ChannelOptions.autoRead, value: true).get()
                    channel.read()
                }
            case .close(let code, let reason):
                try await close(outbound: outbound, channel: channel, code: code, reason: reason)
                return
            case .drop:
                try await channel.close()
                return
            }
        }
    }

    /// Starts the close handshake, and closes the TCP connection if the peer has not answered
    /// within `closeTimeout`. Cancel the task once the peer has answered.
    func close(outbound: WebSocketOutboundWriter, channel: any Channel, code: WebSocketCloseCode, reason: String) async throws {
        try? await outbound.close(code.nio, reason: reason)
        try await Task.sleep(for: configuration.closeTimeout)
        try await channel.close()
    }
}
