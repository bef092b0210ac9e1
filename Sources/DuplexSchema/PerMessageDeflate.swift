/// permessage-deflate settings (RFC 7692), the same type for the client and the server.
///
/// ```swift
/// WebSocketConfiguration(compression: PerMessageDeflate())                      // a client that offers it
/// DuplexServerConfiguration(compression: PerMessageDeflate(maxWindowBits: 12))  // the server's default
/// ```
///
/// What each side's own compressor does is set here; what it asks of the peer is negotiated in
/// the handshake: the client offers, the server answers, and each then compresses messages of
/// at least ``minimumBytes`` and inflates the peer's within its message size limit (a frame
/// that inflates past it gets close 1009, with memory bounded the whole time).
///
/// Memory: a compressor holds about `2^(maxWindowBits+2)` + 128 KiB while in use and an inflater
/// `2^maxWindowBits`; ``noContextTakeover`` makes each message start afresh, at some cost in
/// compression.
public struct PerMessageDeflate: Sendable, Hashable {
    /// Messages smaller than this many bytes are sent uncompressed. Default 256.
    public var minimumBytes: Int
    /// The largest LZ77 window, in bits (9 to 15), this side compresses with. A client offers it
    /// as `client_max_window_bits`; a server answers with it as `server_max_window_bits`.
    /// Default 15.
    public var maxWindowBits: Int
    /// Whether this side starts every message afresh (a client offers
    /// `client_no_context_takeover`, a server answers `server_no_context_takeover`). Default false.
    public var noContextTakeover: Bool
    /// Asks the peer to start every message afresh (a client offers
    /// `server_no_context_takeover`; a server requires `client_no_context_takeover`). Default false.
    public var peerNoContextTakeover: Bool
    /// Asks the peer to use at most this window (a client offers `server_max_window_bits`; a
    /// server caps `client_max_window_bits`); nil leaves it to the peer. Default nil.
    public var peerMaxWindowBits: Int?

    /// Creates the settings; every argument has a default.
    public init(
        minimumBytes: Int = 256,
        maxWindowBits: Int = 15,
        noContextTakeover: Bool = false,
        peerNoContextTakeover: Bool = false,
        peerMaxWindowBits: Int? = nil
    ) {
        self.minimumBytes = max(0, minimumBytes)
        self.maxWindowBits = min(max(maxWindowBits, 9), 15)
        self.noContextTakeover = noContextTakeover
        self.peerNoContextTakeover = peerNoContextTakeover
        self.peerMaxWindowBits = peerMaxWindowBits.map { min(max($0, 9), 15) }
    }
}
