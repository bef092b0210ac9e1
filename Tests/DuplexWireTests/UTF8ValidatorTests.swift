import DuplexWire
import Testing

@Suite("UTF8Validator: incremental, fail-fast UTF-8")
struct UTF8ValidatorTests {
    static let kosme = Array("\u{03BA}\u{1F79}\u{03C3}\u{03BC}\u{03B5}".utf8)

    @Test("valid text split at every byte is accepted, and ends complete only on a character boundary")
    func splitAnywhere() {
        let text = Array("a\u{07FF}\u{0800}\u{FFFF}\u{10000}\u{10FFFF}z".utf8)
        for cut in 0...text.count {
            var validator = UTF8Validator()
            let head = validator.feed(text[..<cut])
            #expect(head)
            #expect(validator.isComplete == (String(validating: text[..<cut], as: UTF8.self) != nil), "cut at \(cut)")
            let tail = validator.feed(text[cut...])
            #expect(tail)
            #expect(validator.isComplete)
        }
    }

    /// Autobahn 6.4.1 and 6.4.2: the fragment that makes the text invalid is refused before the
    /// message ends.
    @Test("a code point above U+10FFFF is refused at its second byte, before the message ends")
    func failFast() {
        var validator = UTF8Validator()
        let text = validator.feed(Self.kosme)
        let lead = validator.feed([0xF4])
        let second = validator.feed([0x90])
        #expect(text && lead && !second)
    }

    @Test(
        "overlong forms, surrogates, stray continuations and bytes that never appear are refused",
        arguments: [
            [0xC0, 0xAF], [0xC1, 0xBF], [0xE0, 0x80, 0xAF], [0xF0, 0x80, 0x80, 0xAF], [0xED, 0xA0, 0x80], [0xED, 0xBF, 0xBF],
            [0x80], [0xBF], [0xF5, 0x80, 0x80, 0x80], [0xFE], [0xFF], [0x61, 0xC2, 0x61],
        ] as [[UInt8]])
    func refuses(bytes: [UInt8]) {
        var validator = UTF8Validator()
        let accepted = validator.feed(bytes)
        #expect(!accepted || !validator.isComplete)
        #expect(String(validating: bytes, as: UTF8.self) == nil)
    }
}
