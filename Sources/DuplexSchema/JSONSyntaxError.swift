/// Where a JSON text first breaks RFC 8259, for an error a person can act on: Foundation's
/// decoder says only "The given data was not valid JSON".
///
/// `duplex-server --script` and `duplex proxy --scenario` name the line, the column and the
/// text around it: `not JSON at line 3, column 58: expected a value (got "h"): {"send": hi}]}}`.
package struct JSONSyntaxError: Sendable, Equatable, CustomStringConvertible {
    /// The line, from 1.
    package var line: Int
    /// The column on that line, from 1, in characters.
    package var column: Int
    /// What was expected there.
    package var reason: String
    /// The line's text around the place (at most 30 characters each side).
    package var excerpt: String

    package var description: String {
        "at line \(line), column \(column): \(reason)" + (excerpt.isEmpty ? "" : ": \(excerpt)")
    }

    /// The first place where `bytes` is not JSON; nil when it is (or is as far as a strict reading
    /// can tell: a text nested deeper than 512 levels is not checked past that depth).
    package static func locate<Bytes: Collection<UInt8>>(in bytes: Bytes) -> JSONSyntaxError? {
        var scanner = Scanner(Array(bytes))
        do throws(Scanner.Failure) {
            scanner.skipSpace()
            try scanner.value(depth: 0)
            scanner.skipSpace()
            if !scanner.atEnd { throw Scanner.Failure(offset: scanner.offset, reason: "more after the end of the JSON value") }
            return nil
        } catch {
            return JSONSyntaxError(in: scanner.bytes, offset: error.offset, reason: error.reason)
        }
    }

    init(in bytes: [UInt8], offset: Int, reason: String) {
        var line = 1
        var lineStart = 0
        for index in 0..<min(offset, bytes.count) where bytes[index] == UInt8(ascii: "\n") {
            line += 1
            lineStart = index + 1
        }
        var lineEnd = lineStart
        while lineEnd < bytes.count, bytes[lineEnd] != UInt8(ascii: "\n"), bytes[lineEnd] != UInt8(ascii: "\r") { lineEnd += 1 }
        let before = String(decoding: bytes[lineStart..<min(offset, lineEnd)], as: UTF8.self)
        let after = String(decoding: bytes[min(offset, lineEnd)..<lineEnd], as: UTF8.self)
        self.line = line
        self.column = before.count + 1
        self.reason = reason
        let head = before.count > 30 ? "…" + String(before.suffix(30)) : before
        let tail = after.count > 30 ? String(after.prefix(30)) + "…" : after
        self.excerpt = head + tail
    }

    /// A strict recursive reading of RFC 8259's grammar.
    struct Scanner {
        struct Failure: Error {
            var offset: Int
            var reason: String
        }

        let bytes: [UInt8]
        var offset = 0

        init(_ bytes: [UInt8]) {
            self.bytes = bytes
        }

        var atEnd: Bool { offset >= bytes.count }

        mutating func skipSpace() {
            while offset < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[offset]) { offset += 1 }
        }

        func shown() -> String {
            guard offset < bytes.count else { return "the end of the text" }
            let scalar =
                bytes[offset] < 0x80
                ? String(UnicodeScalar(bytes[offset])) : String(decoding: bytes[offset...].prefix(4), as: UTF8.self).prefix(1).description
            return scalar.debugDescription
        }

        func fail(_ expected: String) -> Failure {
            Failure(offset: offset, reason: "expected \(expected) (got \(shown()))")
        }

        mutating func value(depth: Int) throws(Failure) {
            guard depth < 512 else { return }
            guard offset < bytes.count else { throw fail("a value") }
            switch bytes[offset] {
            case UInt8(ascii: "{"): try object(depth: depth)
            case UInt8(ascii: "["): try array(depth: depth)
            case UInt8(ascii: "\""): try string()
            case UInt8(ascii: "t"): try literal("true")
            case UInt8(ascii: "f"): try literal("false")
            case UInt8(ascii: "n"): try literal("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try number()
            default: throw fail("a value")
            }
        }

        mutating func object(depth: Int) throws(Failure) {
            offset += 1
            skipSpace()
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "}") {
                offset += 1
                return
            }
            while true {
                skipSpace()
                guard offset < bytes.count, bytes[offset] == UInt8(ascii: "\"") else { throw fail("a member name in double quotes") }
                try string()
                skipSpace()
                guard offset < bytes.count, bytes[offset] == UInt8(ascii: ":") else { throw fail("\":\" after a member name") }
                offset += 1
                skipSpace()
                try value(depth: depth + 1)
                skipSpace()
                guard offset < bytes.count else { throw fail("\",\" or \"}\"") }
                if bytes[offset] == UInt8(ascii: "}") {
                    offset += 1
                    return
                }
                guard bytes[offset] == UInt8(ascii: ",") else { throw fail("\",\" or \"}\"") }
                offset += 1
            }
        }

        mutating func array(depth: Int) throws(Failure) {
            offset += 1
            skipSpace()
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "]") {
                offset += 1
                return
            }
            while true {
                skipSpace()
                try value(depth: depth + 1)
                skipSpace()
                guard offset < bytes.count else { throw fail("\",\" or \"]\"") }
                if bytes[offset] == UInt8(ascii: "]") {
                    offset += 1
                    return
                }
                guard bytes[offset] == UInt8(ascii: ",") else { throw fail("\",\" or \"]\"") }
                offset += 1
            }
        }

        mutating func string() throws(Failure) {
            let start = offset
            offset += 1
            while offset < bytes.count {
                let byte = bytes[offset]
                switch byte {
                case UInt8(ascii: "\""):
                    offset += 1
                    return
                case UInt8(ascii: "\\"):
                    offset += 1
                    guard offset < bytes.count, Array("\"\\/bfnrtu".utf8).contains(bytes[offset]) else {
                        throw fail("an escape (\\\", \\\\, \\/, \\b, \\f, \\n, \\r, \\t or \\uXXXX)")
                    }
                    if bytes[offset] == UInt8(ascii: "u") {
                        for _ in 0..<4 {
                            offset += 1
                            guard offset < bytes.count, bytes[offset].isHexDigit else { throw fail("four hex digits after \\u") }
                        }
                    }
                    offset += 1
                case 0..<0x20:
                    throw Failure(offset: offset, reason: "a control character in a string: write it escaped (\\n, \\t, \\u00XX)")
                default:
                    offset += 1
                }
            }
            throw Failure(offset: start, reason: "a string that is never closed")
        }

        mutating func literal(_ word: String) throws(Failure) {
            let start = offset
            for byte in word.utf8 {
                guard offset < bytes.count, bytes[offset] == byte else { throw Failure(offset: start, reason: "expected \(word)") }
                offset += 1
            }
        }

        mutating func number() throws(Failure) {
            if bytes[offset] == UInt8(ascii: "-") { offset += 1 }
            guard digits() > 0 else { throw fail("a digit") }
            if offset < bytes.count, bytes[offset] == UInt8(ascii: ".") {
                offset += 1
                guard digits() > 0 else { throw fail("a digit after the decimal point") }
            }
            if offset < bytes.count, bytes[offset] == UInt8(ascii: "e") || bytes[offset] == UInt8(ascii: "E") {
                offset += 1
                if offset < bytes.count, bytes[offset] == UInt8(ascii: "+") || bytes[offset] == UInt8(ascii: "-") { offset += 1 }
                guard digits() > 0 else { throw fail("a digit in the exponent") }
            }
        }

        mutating func digits() -> Int {
            let start = offset
            while offset < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[offset]) { offset += 1 }
            return offset - start
        }
    }
}

extension UInt8 {
    fileprivate var isHexDigit: Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(self)
            || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(self)
    }
}
