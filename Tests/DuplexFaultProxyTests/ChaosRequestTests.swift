import DuplexFaultProxy
import DuplexWire
import NIOCore
import NIOPosix
import Testing

/// `ChaosRequest` against servers that do not answer as a chaos endpoint does.
@Suite("ChaosRequest")
struct ChaosRequestTests {
    struct TimedOut: Error {}

    /// A server on a free loopback port that answers each connection's first bytes with `answer`
    /// (nothing: it stays silent).
    final class Answer: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        let bytes: [UInt8]
        init(_ bytes: [UInt8]) { self.bytes = bytes }
        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard !bytes.isEmpty else { return }
            context.writeAndFlush(NIOAny(ByteBuffer(bytes: bytes)), promise: nil)
        }
    }

    static func withServer(answering answer: [UInt8], _ body: (Int) async throws -> Void) async throws {
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { $0.pipeline.addHandler(Answer(answer)) }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        do {
            try await body(server.localAddress?.port ?? 0)
            try await server.close()
        } catch {
            try? await server.close()
            throw error
        }
    }

    @Test("a server that never answers is given up on after the timeout; an answer past 64 KiB is refused, not kept")
    func boundedAnswers() async throws {
        try await withDeadline(.seconds(30), orThrow: { TimedOut() }) {
            try await Self.withServer(answering: []) { port in
                await #expect {
                    try await ChaosRequest.post(host: "127.0.0.1", port: port, "drop", timeout: .milliseconds(200))
                } throws: { "\($0)" == "no answer: it took longer than 0.2 seconds" }
                // A deadline that passes before the request is written (a loaded machine) is the
                // same timeout, not the closed channel's error.
                for _ in 0..<20 {
                    await #expect {
                        try await ChaosRequest.post(host: "127.0.0.1", port: port, "drop", timeout: .zero)
                    } throws: { "\($0)" == "no answer: it took longer than 0.0 seconds" }
                }
            }
            let huge = Array("HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n".utf8) + [UInt8](repeating: 0x61, count: 1_000_000)
            try await Self.withServer(answering: huge) { port in
                await #expect {
                    try await ChaosRequest.post(host: "127.0.0.1", port: port, "drop")
                } throws: { "\($0)".contains("an answer of more than 65536 bytes") }
            }
        }
    }
}
