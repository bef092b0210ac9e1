import NIOCore

/// The server's end of one simulated connection as a swift-nio channel, on a ``ClockEventLoop``:
/// the Duplex server's own WebSocket handler runs in its pipeline as on a socket's, and what it
/// writes leaves through ``flushed`` to cross the simulated link.
///
/// Bytes the client sends arrive through ``receive(_:)`` and are read as a socket's are: only
/// while the pipeline asks to read (a stalled or backpressured handler stops asking, and they
/// wait here). Touched on its loop only.
final class SimulatedChannel: Channel, ChannelCore, @unchecked Sendable {
    private let loop: ClockEventLoop
    private var _pipeline: ChannelPipeline!
    private let closePromise: EventLoopPromise<Void>
    /// Called with each flush's bytes, in order.
    private let flushed: (ByteBuffer) -> Void
    /// Called once when the server closes it (not when the client went away).
    private let closedByServer: () -> Void

    private var active = false
    private var closed = false
    private var readRequested = false
    private var inbound: [ByteBuffer] = []
    private var unflushed: [(ByteBuffer, EventLoopPromise<Void>?)] = []
    private var autoRead = true

    init(loop: ClockEventLoop, flushed: @escaping (ByteBuffer) -> Void, closedByServer: @escaping () -> Void) {
        self.loop = loop
        self.closePromise = loop.makePromise()
        self.flushed = flushed
        self.closedByServer = closedByServer
        self._pipeline = ChannelPipeline(channel: self)
    }

    /// Registers it and makes it active, as an accepted socket: handlers added then see an open
    /// connection.
    func open() {
        pipeline.fireChannelRegistered()
        active = true
        pipeline.fireChannelActive()
    }

    /// Bytes from the client arrived.
    func receive(_ bytes: ByteBuffer) {
        guard active else { return }
        inbound.append(bytes)
        deliver()
    }

    /// The client's end is gone (it dropped, or the path did): the server sees the connection end.
    func clientLeft() {
        guard active else { return }
        close(error: ChannelError.eof, promise: nil, byServer: false)
    }

    // MARK: Channel

    var eventLoop: any EventLoop { loop }
    var pipeline: ChannelPipeline { _pipeline }
    var allocator: ByteBufferAllocator { ByteBufferAllocator() }
    var closeFuture: EventLoopFuture<Void> { closePromise.futureResult }
    var localAddress: SocketAddress? { try? SocketAddress(ipAddress: "127.0.0.1", port: 80) }
    var remoteAddress: SocketAddress? { try? SocketAddress(ipAddress: "127.0.0.1", port: 50_000) }
    var parent: (any Channel)? { nil }
    var isWritable: Bool { true }
    var isActive: Bool { active }
    var _channelCore: any ChannelCore { self }

    func setOption<Option: ChannelOption>(_ option: Option, value: Option.Value) -> EventLoopFuture<Void> {
        if let value = value as? ChannelOptions.Types.AutoReadOption.Value, option is ChannelOptions.Types.AutoReadOption {
            autoRead = value
            if value { pipeline.read() }
            return loop.makeSucceededVoidFuture()
        }
        return loop.makeFailedFuture(ChannelError.operationUnsupported)
    }

    func getOption<Option: ChannelOption>(_ option: Option) -> EventLoopFuture<Option.Value> {
        if option is ChannelOptions.Types.AutoReadOption, let value = autoRead as? Option.Value {
            return loop.makeSucceededFuture(value)
        }
        if option is ChannelOptions.Types.AllowRemoteHalfClosureOption, let value = false as? Option.Value {
            return loop.makeSucceededFuture(value)
        }
        return loop.makeFailedFuture(ChannelError.operationUnsupported)
    }

    // MARK: ChannelCore

    func localAddress0() throws -> SocketAddress {
        guard let address = localAddress else { throw ChannelError.operationUnsupported }
        return address
    }

    func remoteAddress0() throws -> SocketAddress {
        guard let address = remoteAddress else { throw ChannelError.operationUnsupported }
        return address
    }

    func register0(promise: EventLoopPromise<Void>?) { promise?.succeed() }
    func registerAlreadyConfigured0(promise: EventLoopPromise<Void>?) { promise?.succeed() }
    func bind0(to: SocketAddress, promise: EventLoopPromise<Void>?) { promise?.fail(ChannelError.operationUnsupported) }
    func connect0(to: SocketAddress, promise: EventLoopPromise<Void>?) { promise?.fail(ChannelError.operationUnsupported) }

    func write0(_ data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard active else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        unflushed.append((unwrapData(data, as: ByteBuffer.self), promise))
    }

    func flush0() {
        let writes = unflushed
        unflushed = []
        for (bytes, promise) in writes {
            flushed(bytes)
            promise?.succeed()
        }
    }

    func read0() {
        readRequested = true
        deliver()
    }

    func close0(error: any Error, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        close(error: error, promise: promise, byServer: true)
    }

    func triggerUserOutboundEvent0(_ event: Any, promise: EventLoopPromise<Void>?) {
        promise?.fail(ChannelError.operationUnsupported)
    }

    func channelRead0(_ data: NIOAny) {}
    func errorCaught0(error: any Error) {}

    // MARK: Helpers

    /// Reads what arrived, if a read is asked for; after the batch, asks for the next as
    /// auto-read does.
    private func deliver() {
        guard readRequested, active, !inbound.isEmpty else { return }
        readRequested = false
        let batch = inbound
        inbound = []
        for bytes in batch { pipeline.fireChannelRead(bytes) }
        pipeline.fireChannelReadComplete()
        if autoRead, active { pipeline.read() }
    }

    private func close(error: any Error, promise: EventLoopPromise<Void>?, byServer: Bool) {
        guard !closed else {
            promise?.fail(ChannelError.alreadyClosed)
            return
        }
        closed = true
        active = false
        // What was written and not flushed is lost, as a socket's would be.
        let lost = unflushed
        unflushed = []
        for (_, pending) in lost { pending?.fail(error) }
        inbound = []
        if byServer { closedByServer() }
        pipeline.fireChannelInactive()
        pipeline.fireChannelUnregistered()
        promise?.succeed()
        closePromise.succeed()
        loop.execute { [self] in removeHandlers(pipeline: pipeline) }
    }
}
