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
struct PortReservation: ~Copyable {
    private let descriptor: Int32

    /// Binds `host:port`; nil when that is not possible (the port is taken, or the host is not
    /// an address): the restart then relies on trying again.
    init?(host: String, port: Int) {
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
        self.descriptor = descriptor
    }

    /// Lets the port go, just before the server listens on it again.
    consuming func release() {
        close(descriptor)
        discard self
    }

    deinit {
        close(descriptor)
    }
}
