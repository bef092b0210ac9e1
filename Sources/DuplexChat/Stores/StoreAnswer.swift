import DuplexHost
package import NIOCore

/// A room store's answer to a connection: at once (the memory store), or later, on the
/// connection's event loop (the PostgreSQL store, which waits on the database).
package enum StoreAnswer<Value: Sendable>: Sendable {
    case now(Value)
    case later(EventLoopFuture<Value>)
}
