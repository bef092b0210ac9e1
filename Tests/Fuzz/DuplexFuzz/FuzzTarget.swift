import Foundation

/// One fuzz target: a name, and a check that takes any bytes and traps (a precondition, a
/// sanitizer report) when a property it states does not hold.
struct FuzzTarget: Sendable {
    var name: String
    /// What the target checks, for `duplex-fuzz --list` and docs/fuzzing.md.
    var properties: String
    var run: @Sendable ([UInt8]) -> Void
}

/// Every target `duplex-fuzz` knows. Add one here and give it a seed corpus in
/// `Tests/Fuzz/Corpus/NAME/`.
let fuzzTargets: [FuzzTarget] = {
    #if DEBUG
    return [
        SSEParserFuzz.target, ChatFrameFuzz.target, WebSocketEngineFuzz.serverTarget, WebSocketEngineFuzz.enginesTarget,
        WebSocketEngineFuzz.parserTarget, InflateFuzz.target, ResumeFuzz.target,
        UTF8ValidatorFuzz.target,
    ]
    #else
    return []
    #endif
}()

/// Fails the run with a message that says which property broke. A trap is what libFuzzer and
/// the replay runner both report as a crash, with the input saved.
func require(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String, file: StaticString = #file, line: UInt = #line) {
    if !condition() {
        FileHandle.standardError.write(Data("duplex-fuzz: property broken: \(message())\n".utf8))
        fatalError(message(), file: file, line: line)
    }
}

/// Reads fuzz input as a sequence of small decisions followed by the rest as payload.
struct FuzzInput {
    private let bytes: [UInt8]
    private var index = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// The next byte, or 0 when the input is used up.
    mutating func byte() -> UInt8 {
        guard index < bytes.count else { return 0 }
        defer { index += 1 }
        return bytes[index]
    }

    /// What is left.
    mutating func rest() -> [UInt8] {
        defer { index = bytes.count }
        return Array(bytes[min(index, bytes.count)...])
    }

    /// Splits `payload` into chunks whose lengths the next bytes choose (1 to 16, then the rest).
    mutating func chunks(of payload: [UInt8], count: Int) -> [[UInt8]] {
        var chunks: [[UInt8]] = []
        var start = 0
        for _ in 0..<count where start < payload.count {
            let length = Int(byte() % 16) + 1
            let end = min(payload.count, start + length)
            chunks.append(Array(payload[start..<end]))
            start = end
        }
        if start < payload.count { chunks.append(Array(payload[start...])) }
        return chunks
    }
}
