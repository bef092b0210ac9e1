package import NIOCore

/// A WebSocket connection for a server that passes another connection's messages on (a proxy
/// route): the NIO transport with no ``WebSocket`` around it, so no lifecycle, no stream, no task
/// per message. What arrives reaches `delegate` on the connection's event loop, in order, and the
/// connection reads no more while the delegate's
/// ``WebSocketTransportDelegate/transportShouldRead()`` says no.
package enum WebSocketUpstream {
    /// Opens a connection to `request` and completes its handshake. Over HTTP/1.1 it is made on
    /// `eventLoop` when that can make sockets (the server connection's own loop, so that both run
    /// with no hop between them); over HTTP/2 it is a stream of the origin's shared connection,
    /// on that connection's loop. `configuration`'s TLS trust and identity, proxy, HTTP version,
    /// limits, timeouts, watermarks and compression apply; its reconnection, pings and stream
    /// buffering do not.
    /// - Throws: ``WebSocketError``, as ``WebSocket/connect()`` does for one attempt.
    package static func connect(
        request: WebSocketRequest,
        configuration: WebSocketConfiguration,
        on eventLoop: any EventLoop,
        delegate: any WebSocketTransportDelegate
    ) async throws -> any WebSocketTransportConnection {
        // A server holds many such connections idle: each keeps the buffer it reads into, 512
        // bytes at first (as the server's own connections), not NIO's 2 KiB; it grows with reads.
        let transport = NIOWebSocketTransport(
            eventLoop: eventLoop, receiveSizes: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65_536))
        return try await transport.connect(request: request, configuration: configuration, delegate: delegate)
    }
}
