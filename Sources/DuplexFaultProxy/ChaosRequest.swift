import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// A scenario's `chaos` step: `POST /_chaos/PATH` to a `duplex-server` started with `--chaos`
/// (the upstream of the proxy, by default), answered with its status and body.
public enum ChaosRequest {
    /// A chaos endpoint that did not answer 200.
    public struct Refused: Error, CustomStringConvertible, Sendable {
        /// The status (0 when no answer came in time), and the server's answer.
        public var status: Int
        public var body: String
        public var description: String {
            guard status != 0 else { return body }
            return "the server answered \(status)\(status == 404 ? " (is it running with --chaos?)" : ""): \(body)"
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
        let timedOut = NIOLockedValueBox(false)
        let tookTooLong = Refused(status: 0, body: "no answer: it took longer than \(timeout)")
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        // A server that does not answer in time (or a connection that is not
                        // made in time): the channel is closed, and the answer ends unfinished.
                        let deadline = channel.eventLoop.scheduleTask(in: limit) {
                            timedOut.withLockedValue { $0 = true }
                            channel.close(promise: nil)
                        }
                        channel.closeFuture.whenComplete { _ in deadline.cancel() }
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()
                        return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(wrappingChannelSynchronously: channel)
                    }
                }
            return try await exchange(channel, host: host, port: port, path: path)
        } catch {
            // Once the deadline closed the channel, whatever failed (the connection, the request's
            // write on a closed channel, or the answer's end) failed because it took too long.
            if timedOut.withLockedValue({ $0 }) { throw tookTooLong }
            throw error
        }
    }

    /// Writes the request on `channel` and reads its answer, then closes the channel.
    private static func exchange(
        _ channel: NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>,
        host: String,
        port: Int,
        path: String
    ) async throws -> String {
        try await channel.executeThenClose { inbound, outbound in
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
            throw Refused(status: status, body: "(the connection closed before the answer ended)")
        }
    }
}
