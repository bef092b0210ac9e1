#if DEBUG
import DuplexWire

/// The incremental UTF-8 validator against the standard library's, however the bytes are split.
enum UTF8ValidatorFuzz {
    static let target = FuzzTarget(
        name: "utf8",
        properties:
            "no crash; fed in any chunks, the validator accepts exactly the byte strings the standard library decodes as UTF-8, and refuses at the first chunk after which no continuation could be valid"
    ) { bytes in
        var input = FuzzInput(bytes)
        let chunkCount = Int(input.byte() % 8)
        let payload = input.rest()
        let expected = String(validating: payload, as: UTF8.self) != nil
        var validator = UTF8Validator()
        var seen: [UInt8] = []
        var refused = false
        var chunker = FuzzInput(bytes)
        for chunk in chunker.chunks(of: payload, count: chunkCount) {
            seen += chunk
            if !validator.feed(chunk) {
                refused = true
                // Refused early only if no ending makes these bytes valid: a longest possible
                // character (4 bytes) of continuation bytes cannot repair them.
                require(!canBeCompleted(seen), "refused a prefix that can still be completed: \(seen)")
                break
            }
        }
        let accepted = !refused && validator.isComplete
        require(accepted == expected, "validator says \(accepted), the standard library \(expected), for \(payload)")
    }

    /// Whether some ending makes `prefix` valid UTF-8 (tries every continuation of up to 3 bytes
    /// from the ones a character may need).
    static func canBeCompleted(_ prefix: [UInt8]) -> Bool {
        if String(validating: prefix, as: UTF8.self) != nil { return true }
        for first in [0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF] as [UInt8] {
            for length in 1...3 {
                let tail = [first] + Array(repeating: UInt8(0x80), count: length - 1)
                if String(validating: prefix + tail, as: UTF8.self) != nil { return true }
            }
        }
        return false
    }
}
#endif
