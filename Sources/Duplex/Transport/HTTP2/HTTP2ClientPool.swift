import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP2

/// The process's HTTP/2 connections, one per origin (``Key``) at a time, which its WebSockets
/// and SSE streams share (``HTTPVersionPreference``).
///
/// A socket or stream takes a lease on its origin's connection (opening it when there is none,
/// or when the one there is retired) and gives it back when its stream closes. The connection is
/// opened in a task of its own, so that a caller cancelled while it opens does not fail the
/// others waiting for it; that caller waits at most the connect timeout. A connection is retired
/// (new leases go to a new one) when the server sends GOAWAY, when it closes, or when it failed
/// to open; it is closed when its last lease is given back, so that no connection outlives its
/// sockets.
final class HTTP2ClientPool: Sendable {
    static let shared = HTTP2ClientPool()

    /// An origin, and everything that decides how its connection is made: sockets share a
    /// connection only when they would have made the same one.
    struct Key: Hashable, Sendable {
        var host: String
        var port: Int
        var tlsTrust: TLSTrust
        var tlsIdentity: TLSIdentity?
        var proxy: Proxy?

        init(endpoint: WebSocketRequest.Endpoint, settings: some ConnectionSettings) {
            host = endpoint.host
            port = endpoint.port
            tlsTrust = settings.tlsTrust
            tlsIdentity = settings.tlsIdentity
            proxy = settings.proxy
        }
    }

    /// A connection, open or on its way, and the leases on it.
    private struct Slot {
        var key: Key
        var connection: Task<HTTP2ClientConnection, any Error>
        var leases: Int
        var retired: Bool
    }

    private struct State {
        var nextID: UInt64 = 0
        /// The connection new leases on an origin go to.
        var current: [Key: UInt64] = [:]
        /// Every connection with leases, current or retired.
        var slots: [UInt64: Slot] = [:]
        /// Origins found without HTTP/2 (``HTTPVersionPreference/automatic``).
        var withoutHTTP2: Set<Key> = []
        /// Origins found with HTTP/2 but without extended CONNECT: no WebSocket over HTTP/2.
        var withoutExtendedConnect: Set<Key> = []
    }

    private let state = NIOLockedValueBox(State())

    /// How many origins without HTTP/2 (and without extended CONNECT) are remembered.
    static let maxRemembered = 1024

    /// A socket's share of a connection; ``release()`` gives it back, once.
    struct Lease: Sendable {
        let connection: HTTP2ClientConnection
        fileprivate let id: UInt64
        fileprivate let pool: HTTP2ClientPool

        func release() {
            pool.release(id)
        }

        /// Opens a stream on the connection and has `configure` set it up, on its event loop;
        /// what `configure` completes `opened` with is returned. The lease is given back when the
        /// stream closes, or when it could not be opened; cancelling the task closes the stream.
        func openStream<Output: Sendable>(
            _ configure: @escaping @Sendable (_ stream: any Channel, _ opened: EventLoopPromise<Output>) throws -> Void
        ) async throws -> Output {
            let eventLoop = connection.channel.eventLoop
            let stream = eventLoop.makePromise(of: (any Channel).self)
            let opened = eventLoop.makePromise(of: Output.self)
            stream.futureResult.whenComplete { result in
                switch result {
                case .success(let channel): channel.closeFuture.whenComplete { _ in release() }
                case .failure(let error):
                    release()
                    opened.fail(error)
                }
            }
            connection.multiplexer.createStreamChannel(promise: stream) { channel in
                channel.eventLoop.makeCompletedFuture { try configure(channel, opened) }
            }
            return try await withTaskCancellationHandler {
                try await opened.futureResult.get()
            } onCancel: {
                stream.futureResult.whenSuccess { $0.close(promise: nil) }
            }
        }
    }

    /// Opens a stream, as ``Lease/openStream(_:)`` does, on a connection `leasing` gives. A
    /// stream the server did not act on (``HTTP2ClientConnection/didNotProcess(_:)``: refused,
    /// or crossed by a GOAWAY) is opened once more on a new connection, its old one retired
    /// first: a request never sent twice to a server that acted on it.
    func openStream<Output: Sendable>(
        leasing: @Sendable () async throws -> Lease,
        _ configure: @escaping @Sendable (_ stream: any Channel, _ opened: EventLoopPromise<Output>) throws -> Void
    ) async throws -> Output {
        let lease = try await leasing()
        do {
            return try await lease.openStream(configure)
        } catch let error where lease.connection.didNotProcess(error) {
            retire(lease.id)
            return try await leasing().openStream(configure)
        }
    }

    /// A lease on `key`'s connection, opened with `open` when there is none to share.
    /// - Throws: what `open` threw.
    func lease(_ key: Key, open: @escaping @Sendable () async throws -> HTTP2ClientConnection) async throws -> Lease {
        let (id, connection, opened) = state.withLockedValue { state -> (UInt64, Task<HTTP2ClientConnection, any Error>, Bool) in
            if let id = state.current[key], var slot = state.slots[id], !slot.retired {
                slot.leases += 1
                state.slots[id] = slot
                return (id, slot.connection, false)
            }
            state.nextID += 1
            let id = state.nextID
            let task = Task { try await open() }
            state.current[key] = id
            state.slots[id] = Slot(key: key, connection: task, leases: 1, retired: false)
            return (id, task, true)
        }
        do {
            let opened_ = try await connection.value
            if opened {
                // Retired on GOAWAY or close (a closed connection's monitor reports GOAWAY too).
                opened_.goAway.whenComplete { _ in self.retire(id) }
            }
            return Lease(connection: opened_, id: id, pool: self)
        } catch {
            retire(id)
            release(id)
            throw error
        }
    }

    /// Whether an earlier ``HTTPVersionPreference/automatic`` connection found `key` without
    /// HTTP/2 (or, `forWebSockets`, without extended CONNECT).
    func isWithoutHTTP2(_ key: Key, forWebSockets: Bool) -> Bool {
        state.withLockedValue { $0.withoutHTTP2.contains(key) || (forWebSockets && $0.withoutExtendedConnect.contains(key)) }
    }

    /// Remembers what `key` lacks: HTTP/2, or extended CONNECT. At most ``maxRemembered``
    /// origins each: past that the memory starts over (an origin then costs one more try).
    func markWithout(_ unavailable: HTTP2ClientConnection.Unavailable, _ key: Key) {
        state.withLockedValue { state in
            if state.withoutHTTP2.count >= Self.maxRemembered { state.withoutHTTP2 = [] }
            if state.withoutExtendedConnect.count >= Self.maxRemembered { state.withoutExtendedConnect = [] }
            switch unavailable.missing {
            case .http2: _ = state.withoutHTTP2.insert(key)
            case .extendedConnect: _ = state.withoutExtendedConnect.insert(key)
            }
        }
    }

    /// A lease on the connection to `endpoint` with `settings`, opened (ALPN: `h2`, and
    /// `http/1.1` too for ``HTTPVersionPreference/automatic``) when there is none to share.
    /// - Parameter forWebSockets: whether the server must announce extended CONNECT.
    /// - Throws: ``HTTP2ClientConnection/Unavailable``; otherwise what ``ClientConnector``
    ///   throws.
    func lease(
        endpoint: WebSocketRequest.Endpoint,
        settings: some ConnectionSettings,
        preference: HTTPVersionPreference,
        waterMark: ChannelOptions.Types.WriteBufferWaterMark,
        forWebSockets: Bool
    ) async throws -> Lease {
        var connector = ClientConnector(endpoint: endpoint, settings: settings, waterMark: nil, stageName: "the HTTP/2 connection")
        connector.applicationProtocols = preference == .automatic ? ["h2", "http/1.1"] : ["h2"]
        let opening = connector
        let key = Key(endpoint: endpoint, settings: settings)
        let lease = try await lease(key) {
            try await opening.connectNegotiating { channel, negotiated in
                try HTTP2ClientConnection.configure(channel, negotiated: negotiated, waterMark: waterMark)
            }
        }
        if forWebSockets, !lease.connection.extendedConnect {
            lease.release()
            throw HTTP2ClientConnection.Unavailable(
                missing: .extendedConnect,
                reason: "the server does not announce extended CONNECT (RFC 8441's SETTINGS_ENABLE_CONNECT_PROTOCOL)"
            )
        }
        return lease
    }

    /// New leases on this connection's origin go to a new connection.
    private func retire(_ id: UInt64) {
        let closing = state.withLockedValue { state -> Task<HTTP2ClientConnection, any Error>? in
            guard var slot = state.slots[id] else { return nil }
            slot.retired = true
            if state.current[slot.key] == id { state.current[slot.key] = nil }
            if slot.leases == 0 {
                state.slots[id] = nil
                return slot.connection
            }
            state.slots[id] = slot
            return nil
        }
        closing.map(Self.close)
    }

    private func release(_ id: UInt64) {
        let closing = state.withLockedValue { state -> Task<HTTP2ClientConnection, any Error>? in
            guard var slot = state.slots[id] else { return nil }
            slot.leases -= 1
            guard slot.leases == 0 else {
                state.slots[id] = slot
                return nil
            }
            state.slots[id] = nil
            if state.current[slot.key] == id { state.current[slot.key] = nil }
            return slot.connection
        }
        closing.map(Self.close)
    }

    /// Closes a connection no lease holds any more.
    private static func close(_ connection: Task<HTTP2ClientConnection, any Error>) {
        Task { try? await connection.value.channel.close() }
    }
}
