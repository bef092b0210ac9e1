/// What the two ends of one connection agreed about permessage-deflate (RFC 7692 section 7.1),
/// seen from this end: how it compresses what it sends, and how the peer compresses what it
/// receives.
package struct DeflateAgreement: Sendable, Equatable {
    /// The window this end compresses with (9 to 15; under 9, zlib cannot, and this end sends
    /// uncompressed).
    package var sendWindowBits = 15
    /// Whether this end starts every message it sends afresh.
    package var sendNoContextTakeover = false
    /// The window the peer compresses with: what this end's inflater keeps of the past.
    package var receiveWindowBits = 15
    /// Whether the peer starts every message afresh.
    package var receiveNoContextTakeover = false
    /// Messages smaller than this are sent uncompressed.
    package var minimumBytes = 0

    package init(
        sendWindowBits: Int = 15, sendNoContextTakeover: Bool = false, receiveWindowBits: Int = 15, receiveNoContextTakeover: Bool = false,
        minimumBytes: Int = 0
    ) {
        self.sendWindowBits = sendWindowBits
        self.sendNoContextTakeover = sendNoContextTakeover
        self.receiveWindowBits = receiveWindowBits
        self.receiveNoContextTakeover = receiveNoContextTakeover
        self.minimumBytes = minimumBytes
    }
}
