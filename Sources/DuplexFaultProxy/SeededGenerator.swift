/// A random number generator whose whole state is a seed (SplitMix64), so that a run's fault
/// decisions can be made again: ``FaultProxy`` draws every random choice from one, derived from
/// its ``FaultProxy/seed``.
///
/// Not for cryptography. The standard library's generator cannot be seeded, hence this one; its
/// sequence for a seed is fixed, so a seed printed by one version of Duplex replays the same
/// decisions with the next.
public struct SeededGenerator: RandomNumberGenerator, Sendable {
    private var state: UInt64

    /// A generator that starts from `seed`.
    public init(seed: UInt64) {
        state = seed
    }

    /// A generator of its own for one stream of decisions made under `seed` (a connection, one
    /// direction of it, one toxic): streams apart do not depend on each other's order.
    public init(seed: UInt64, stream: UInt64...) {
        var mixer = SeededGenerator(seed: seed)
        var mixed = mixer.next()
        for part in stream {
            mixer = SeededGenerator(seed: mixed ^ part)
            mixed = mixer.next()
        }
        state = mixed
    }

    /// The next 64 random bits.
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A double in `0 ..< 1`, from the top 53 bits.
    mutating func unit() -> Double {
        Double(next() >> 11) / Double(UInt64(1) << 53)
    }
}
