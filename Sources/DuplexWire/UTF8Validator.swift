/// Validates UTF-8 a piece at a time, so that a text message split across WebSocket fragments
/// can be refused at the first fragment that makes it invalid (RFC 6455 section 8.1: "fail
/// fast"), not only once it is whole.
///
/// It follows the well-formed byte sequences of the Unicode Standard, table 3-7: no overlong
/// forms, no surrogates, nothing above U+10FFFF. ``isComplete`` says whether the bytes so far end
/// on a character boundary.
package struct UTF8Validator: Sendable, Equatable {
    /// Continuation bytes still expected for the current character.
    private var remaining: UInt8 = 0
    /// The range the next continuation byte must fall in (narrower than 80...BF right after
    /// E0, ED, F0 and F4).
    private var lower: UInt8 = 0x80
    private var upper: UInt8 = 0xBF

    package init() {}

    /// Whether the bytes fed so far end on a character boundary.
    package var isComplete: Bool { remaining == 0 }

    /// Feeds more bytes; false when they cannot be part of well-formed UTF-8 (the validator
    /// should then be discarded or ``reset()``).
    package mutating func feed(_ bytes: some Sequence<UInt8>) -> Bool {
        for byte in bytes {
            if remaining == 0 {
                if byte < 0x80 { continue }
                switch byte {
                case 0xC2...0xDF: (remaining, lower, upper) = (1, 0x80, 0xBF)
                case 0xE0: (remaining, lower, upper) = (2, 0xA0, 0xBF)
                case 0xE1...0xEC, 0xEE...0xEF: (remaining, lower, upper) = (2, 0x80, 0xBF)
                case 0xED: (remaining, lower, upper) = (2, 0x80, 0x9F)
                case 0xF0: (remaining, lower, upper) = (3, 0x90, 0xBF)
                case 0xF1...0xF3: (remaining, lower, upper) = (3, 0x80, 0xBF)
                case 0xF4: (remaining, lower, upper) = (3, 0x80, 0x8F)
                default: return false
                }
            } else {
                guard byte >= lower, byte <= upper else { return false }
                remaining -= 1
                (lower, upper) = (0x80, 0xBF)
            }
        }
        return true
    }

    /// Starts again, for the next message.
    package mutating func reset() {
        self = UTF8Validator()
    }
}
