import DuplexHost
import NIOCore
import Testing

/// The host's faults without a connection: who may ask for them, what a scope reaches, and the
/// close reason a frame can carry.
@Suite("HostServer faults")
struct HostFaultsTests {
    @Test("only loopback peers may use the chaos endpoints")
    func loopbackOnly() throws {
        #expect(HostServer.isLoopback(try SocketAddress(ipAddress: "127.0.0.1", port: 1)))
        #expect(HostServer.isLoopback(try SocketAddress(ipAddress: "127.8.9.10", port: 1)))
        #expect(HostServer.isLoopback(try SocketAddress(ipAddress: "::1", port: 1)))
        #expect(!HostServer.isLoopback(try SocketAddress(ipAddress: "10.0.0.1", port: 1)))
        #expect(!HostServer.isLoopback(try SocketAddress(ipAddress: "192.168.1.2", port: 1)))
        #expect(!HostServer.isLoopback(nil))
    }

    @Test("a close reason past 123 bytes of UTF-8 is cut at a character boundary")
    func closeReason() {
        #expect(HostServer.closeReason("bye") == "bye")
        let long = String(repeating: "é", count: 100)  // 200 bytes
        let cut = HostServer.closeReason(long)
        #expect(cut.utf8.count == 122 && long.hasPrefix(cut))
    }
}
