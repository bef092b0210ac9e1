package import Foundation
import NIOCore
import NIOPosix
import NIOSSL

/// One HTTP/1.1 request over a raw connection, closed by the server; over TLS trusting
/// `caPEM` when given.
package enum HTTPProbe {
    package static func get(port: Int, _ path: String, caPEM: String? = nil) async throws -> String {
        try await send(port: port, "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", caPEM: caPEM)
    }

    /// Sends `request` as it is and returns everything the server answers until it closes.
    package static func send(port: Int, _ request: String, caPEM: String? = nil) async throws -> String {
        let context: NIOSSLContext? = try caPEM.map { pem in
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(pem.utf8)))
            return try NIOSSLContext(configuration: tls)
        }
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let context {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                    }
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(ByteBuffer(string: request))
            var text = ""
            do {
                for try await chunk in inbound { text += String(buffer: chunk) }
            } catch let error as NIOSSLError where error == .uncleanShutdown {
                // The server closed without a TLS close_notify after its Connection: close answer.
            }
            return text
        }
    }

    /// The status code and body of `url`'s answer (`http` or `https` on 127.0.0.1).
    package static func get(_ url: URL, caPEM: String?) async throws -> (status: Int, body: String) {
        let text = try await get(port: url.port ?? 80, url.path + (url.query.map { "?\($0)" } ?? ""), caPEM: caPEM)
        let status = text.split(separator: " ", maxSplits: 2).dropFirst().first.flatMap { Int($0) } ?? 0
        let body = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
        return (status, body)
    }
}
