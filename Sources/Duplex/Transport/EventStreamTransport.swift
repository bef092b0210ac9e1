package import Foundation
package import NIOCore
package import NIOHTTP1

/// Where an event stream's request goes: over the network (``EventStreamConnection``, the
/// default), or through a simulated network (DuplexTesting's `SimulatedNetwork`), whose
/// connections are events on a test clock.
package protocol EventStreamTransport: Sendable {
    /// Sends `method` for `endpoint` with `headers` and `body`, and returns once the response
    /// head has arrived. A connection that takes longer than the configuration's connect timeout
    /// fails with ``WebSocketError/Code/connectTimeout``; the body, once open, fails with
    /// ``SSEError/Code/readTimeout`` when a read wanted brings nothing within its read timeout.
    func open(
        endpoint: WebSocketRequest.Endpoint,
        method: HTTPMethod,
        headers: HTTPHeaders,
        body: Data?,
        configuration: SSEConfiguration
    ) async throws -> EventStreamResponse
}

/// The response to an event stream's request: its head, and the connection that carries its body.
package struct EventStreamResponse: Sendable {
    package var head: HTTPResponseHead
    package var body: any EventStreamBody

    package init(head: HTTPResponseHead, body: any EventStreamBody) {
        self.head = head
        self.body = body
    }
}

/// A response's body, read as it is consumed: a connection stops reading while its reader is
/// behind. It ends cleanly at the response's end, and throws on a drop.
package protocol EventStreamBody: Sendable {
    /// Reads the body's chunks with `read`, then closes the connection.
    func readThenClose(_ read: (inout any EventStreamChunks) async throws -> Void) async throws

    /// Closes the connection: a read under way ends.
    func close() async

    /// Closes the connection after `delay` unless the returned closure is called first: a
    /// deadline for reading an answer that is not a stream.
    func close(after delay: Duration) -> @Sendable () -> Void
}

/// A body's chunks, in order; nil at its end.
package protocol EventStreamChunks {
    mutating func next() async throws -> ByteBuffer?
}
