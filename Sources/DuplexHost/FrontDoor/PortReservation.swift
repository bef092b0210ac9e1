import NIOConcurrencyHelpers
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Holds a TCP port while the server is down for a restart: a socket bound to it that does not
/// listen. Connections to the port are refused, as they would be to a stopped process, but no
/// outgoing connection can take the port as its local port meanwhile (the system skips bound
/// ports when it picks one), so the server can listen on it again.
///
/// On Linux the new listener can bind while the reservation is held (both set `SO_REUSEADDR`
/// and the reservation does not listen), so the server lets the reservation go only once it
/// listens again: there is no moment when the port is free. Elsewhere it lets go just before.
/// A process that binds with `SO_REUSEADDR` itself can still share the port meanwhile.
package final class PortReservation: Sendable {
    private let descriptor: NIOLockedValueBox<Int32?>

    /// Whether the listener can bind while the port is held.
    package static var holdsUntilListening: Bool {
        #if os(Linux)
        true
        #else
        false
        #endif
    }

    /// Binds `host:port`; nil when that is not possible (the port is taken, or the host is not
    /// an address): the restart then relies on trying again.
    package init?(host: String, port: Int) {
        guard let address = try? SocketAddress(ipAddress: host == "localhost" ? "127.0.0.1" : host, port: port) else { return nil }
        let family: Int32
        switch address {
        case .v4: family = AF_INET
        case .v6: family = AF_INET6
        default: return nil
        }
        #if canImport(Glibc)
        let descriptor = socket(family, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let descriptor = socket(family, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { return nil }
        var on: Int32 = 1
        _ = setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        let bound = address.withSockAddr { pointer, size in bind(descriptor, pointer, socklen_t(size)) }
        guard bound == 0 else {
            close(descriptor)
            return nil
        }
        self.descriptor = NIOLockedValueBox(descriptor)
    }

    /// Lets the port go; later calls do nothing.
    package func release() {
        if let descriptor = descriptor.withLockedValue({ value in
            defer { value = nil }; return value
        }) {
            close(descriptor)
        }
    }

    deinit {
        release()
    }
}
