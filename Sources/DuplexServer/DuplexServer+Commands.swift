import DuplexSchema
import HummingbirdWebSocket
import NIOCore

extension DuplexServer {
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
