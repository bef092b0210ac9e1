import NIOCore
import NIOHTTP1
import NIOPosix

/// A scenario's `chaos` step: `POST /_chaos/PATH` to a `duplex-server` started with `--chaos`
/// (the upstream of the proxy, by default), answered with its status and body.
public enum ChaosRequest {
    /// A chaos endpoint that did not answer 200.
    public struct Refused: Error, CustomStringConvertible, Sendable {
        /// The status, and the server's answer.
        public var status: Int
        public var body: String
        public var description: String {
            "the server answered \(status)\(status == 404 ? " (is it running with --chaos?)" : ""): \(body)"
        }
    }

    /// How large an answer's body may be: a chaos endpoint answers with a line of JSON.
    static let maxBodyBytes = 64 * 1024

    /// Sends `POST /_chaos/PATH` (`PATH` is what follows `/_chaos/`, with its query: `drop?route=echo`)
    /// to `host`:`port` and returns the answer's body.
    /// - Throws: ``Refused`` when the status is not 200, the answer takes longer than `timeout`
    ///   or its body is larger than 64 KiB; the connection's error when there is none.
    @discardableResult
    public static func post(host: String, port: Int, _ path: String, timeout: Duration = .seconds(10)) async throws -> String {
        let (seconds, attoseconds) = timeout.components
        let limit = TimeAmount.nanoseconds(min(max(seconds, 0), 86_400) * 1_000_000_000 + attoseconds / 1_000_000_000)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    // A server that does not answer in time: the connection is closed, and the
                    // answer ends unfinished.
                    let deadline = channel.eventLoop.scheduleTask(in: limit) { channel.close(promise: nil) }
                    channel.closeFuture.whenComplete { _ in deadline.cancel() }
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            var head = HTTPRequestHead(version: .http1_1, method: .POST, uri: "/_chaos/" + path)
            head.headers.add(name: "Host", value: host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
            head.headers.add(name: "Content-Length", value: "0")
            head.headers.add(name: "Connection", value: "close")
            try await outbound.write(.head(head))
            try await outbound.write(.end(nil))
            var status = 0
            var body = ""
            for try await part in inbound {
                switch part {
                case .head(let head): status = Int(head.status.code)
                case .body(let buffer):
                    guard body.utf8.count + buffer.readableBytes <= maxBodyBytes else {
                        throw Refused(status: status, body: "(an answer of more than \(maxBodyBytes) bytes)")
                    }
                    body += String(buffer: buffer)
                case .end:
                    guard status == 200 else { throw Refused(status: status, body: body) }
                    return body
                }
            }
            throw Refused(status: status, body: "(the connection closed before the answer ended, or it took longer than \(timeout))")
        }
    }
}
