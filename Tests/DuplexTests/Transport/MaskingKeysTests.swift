@testable import Duplex
import NIOWebSocket
import Testing

@Suite("MaskingKeys")
struct MaskingKeysTests {
    @Test("every key is fresh: 3,000 keys, across refills of the random buffer, are all different, and each of their four bytes varies")
    func freshKeys() {
        var keys = MaskingKeys()
        var seen = Set<UInt32>()
        var bytes = [Set<UInt8>](repeating: [], count: 4)
        for _ in 0..<3_000 {
            let key = keys.next()
            seen.insert(key.reduce(0) { $0 << 8 | UInt32($1) })
            for (position, byte) in key.enumerated() { bytes[position].insert(byte) }
        }
        // 3,000 draws of 32 random bits collide with a chance of about 1 in 1,000: allow one.
        #expect(seen.count >= 2_999)
        // Each of the four positions takes (nearly) every byte value: no position is fixed.
        #expect(bytes.allSatisfy { $0.count > 250 }, "distinct values per position: \(bytes.map(\.count))")
    }
}
